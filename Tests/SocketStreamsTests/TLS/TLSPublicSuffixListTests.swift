import Foundation
@testable import SocketStreams
import XCTest

/// The Public Suffix List as `VerificationProfile.baselineRequirements` reads it: the ICANN section's
/// rules (plain, wildcard, exception, in U-labels), the PRIVATE section left out, the default rule, and
/// what is left when the system's file is absent.
final class TLSPublicSuffixListTests: XCTestCase {
    private let sample = """
        // a comment
        // ===BEGIN ICANN DOMAINS===
        uk
        co.uk
        *.ck
        !www.ck
        // a comment inside
        公司.cn
        cn
        // ===END ICANN DOMAINS===
        // ===BEGIN PRIVATE DOMAINS===
        s3.amazonaws.com
        github.io
        // ===END PRIVATE DOMAINS===
        """

    func testRulesOfTheICANNSection() {
        let list = PublicSuffixList(text: sample)
        XCTAssertTrue(list.isLoaded)
        XCTAssertTrue(list.isPublicSuffix("co.uk"))
        XCTAssertTrue(list.isPublicSuffix("CO.UK."))  // case and a trailing period ignored
        XCTAssertFalse(list.isPublicSuffix("example.co.uk"))
        XCTAssertTrue(list.isPublicSuffix("anything.ck"))  // *.ck
        XCTAssertFalse(list.isPublicSuffix("www.ck"))  // !www.ck
        XCTAssertFalse(list.isPublicSuffix("a.b.ck"))
        XCTAssertTrue(list.isPublicSuffix("xn--55qx5d.cn"))  // 公司.cn, kept as its A-labels
        XCTAssertTrue(list.isPublicSuffix("com"))  // one label: the default rule "*"
        XCTAssertFalse(list.isPublicSuffix("s3.amazonaws.com"))  // PRIVATE section: not counted
        XCTAssertFalse(list.isPublicSuffix("github.io"))
    }

    func testWildcardRefusalNamesTheSuffix() throws {
        let list = PublicSuffixList(text: sample)
        XCTAssertNil(list.wildcardOverPublicSuffix(["example.co.uk", "s3.amazonaws.com"]))
        let reason = try XCTUnwrap(list.wildcardOverPublicSuffix(["example.com", "co.uk"]))
        XCTAssertTrue(reason.contains("\"*.co.uk\": co.uk is a public suffix in /usr/share/publicsuffix/public_suffix_list.dat"), reason)
    }

    /// Without the file, only the default rule is left: a single label is a public suffix, and the
    /// refusal says the file is absent.
    func testAbsentListLeavesTheDefaultRule() throws {
        let list = PublicSuffixList(contentsOfFile: "/nonexistent/public_suffix_list.dat")
        XCTAssertFalse(list.isLoaded)
        XCTAssertTrue(list.isPublicSuffix("com"))
        XCTAssertFalse(list.isPublicSuffix("co.uk"))
        let reason = try XCTUnwrap(list.wildcardOverPublicSuffix(["uk"]))
        XCTAssertTrue(reason.contains("is absent, so only single labels are known as public suffixes"), reason)
    }

    /// The system's list, which Scripts/test installs (Debian's `publicsuffix`).
    func testSystemList() {
        let list = PublicSuffixList.system
        XCTAssertTrue(list.isLoaded, "\(PublicSuffixList.systemPath) is missing: apt-get install publicsuffix")
        XCTAssertTrue(list.isPublicSuffix("co.uk"))
        XCTAssertTrue(list.isPublicSuffix("com"))
        XCTAssertFalse(list.isPublicSuffix("example.com"))
        XCTAssertFalse(list.isPublicSuffix("s3.amazonaws.com"))
    }
}
