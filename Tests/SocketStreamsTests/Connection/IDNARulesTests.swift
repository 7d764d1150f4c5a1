import Foundation
import SocketStreamsTestSupport
@testable import SocketStreams
import XCTest

/// The contextual rules for the joiners (RFC 5892 Appendix A.1, A.2) and the Bidi rule (RFC 5893 §2)
/// in the host-name conversion: each rule both ways, at its boundaries, and a seeded fuzz of labels whose
/// verdict is checked against a second, regular-expression statement of the Bidi rule and whose A-labels
/// decode back to the label.
final class IDNARulesTests: XCTestCase {
    private func assertConverts(_ host: String, file: StaticString = #filePath, line: UInt = #line) {
        switch IDNA.toASCII(host) {
        case .success(let ascii):
            XCTAssertTrue(ascii.hasPrefix("xn--") || ascii.contains(".xn--"), "\(host) became \(ascii)", file: file, line: line)
        case .failure(let failure): XCTFail("\(host) refused: \(failure.reason)", file: file, line: line)
        }
    }

    private func assertRefuses(_ host: String, _ fragments: [String], file: StaticString = #filePath, line: UInt = #line) {
        switch IDNA.toASCII(host) {
        case .success(let ascii): XCTFail("\(host) became \(ascii)", file: file, line: line)
        case .failure(let failure):
            for fragment in fragments {
                XCTAssertTrue(failure.reason.contains(fragment), "\(host): \(failure.reason)", file: file, line: line)
            }
        }
    }

    // MARK: CONTEXTJ

    func testJoinersAfterAViramaAreAllowed() {
        assertConverts("क्\u{200C}ष.example")  // ZWNJ after DEVANAGARI SIGN VIRAMA (A.1, first clause)
        assertConverts("क्\u{200D}ष.example")  // ZWJ after the virama (A.2)
        assertConverts("ಕ್\u{200D}ಷ.example")  // Kannada's virama
    }

    func testZeroWidthJoinerElsewhereIsRefused() {
        assertRefuses("bü\u{200D}cher.example", ["U+200D", "ZERO WIDTH JOINER", "CONTEXTJ", "only after a virama"])
        assertRefuses("\u{200D}ü.example", ["U+200D"])
        assertRefuses("ü\u{200D}.example", ["U+200D"])
        assertRefuses("ب\u{200D}ب.example", ["U+200D"])  // joining letters do not make a ZWJ valid
    }

    func testZeroWidthNonJoinerBetweenJoiningLetters() {
        // Persian "mi-khaham": YEH (dual) ZWNJ KHAH (dual), the usual spelling of the prefix.
        assertConverts("می\u{200C}خواهم.example")
        // Marks (transparent) between the letters and the non-joiner are skipped, on either side.
        assertConverts("بَ\u{200C}ب.example")
        assertConverts("ب\u{200C}\u{064E}ب.example")
        // A dual-joining letter before, a right-joining one (ALEF) after.
        assertConverts("ب\u{200C}ا.example")
    }

    func testZeroWidthNonJoinerWithoutItsContextIsRefused() {
        assertRefuses("د\u{200C}ب.example", ["U+200C", "ZERO WIDTH NON-JOINER"])  // DAL joins only on its right
        assertRefuses("ب\u{200C}ء.example", ["U+200C"])  // HAMZA does not join
        assertRefuses("ب\u{200C}.example", ["U+200C"])  // nothing after it
        assertRefuses("\u{200C}ب.example", ["U+200C"])  // nothing before it
        assertRefuses("bü\u{200C}cher.example", ["U+200C"])  // Latin letters do not join
        assertRefuses("ب\u{200C}\u{200C}ب.example", ["U+200C"])  // a second non-joiner is not transparent
    }

    func testJoiningTypes() {
        XCTAssertEqual(IDNA.joiningType("\u{0628}"), .dual)  // BEH
        XCTAssertEqual(IDNA.joiningType("\u{0627}"), .right)  // ALEF
        XCTAssertEqual(IDNA.joiningType("\u{062F}"), .right)  // DAL
        XCTAssertEqual(IDNA.joiningType("\u{0621}"), .none)  // HAMZA
        XCTAssertEqual(IDNA.joiningType("\u{064E}"), .transparent)  // FATHA
        XCTAssertEqual(IDNA.joiningType("\u{0710}"), .right)  // SYRIAC ALAPH
        XCTAssertEqual(IDNA.joiningType("\u{0712}"), .dual)  // SYRIAC BETH
        XCTAssertEqual(IDNA.joiningType("a"), .none)
        XCTAssertEqual(IDNA.joiningType("\u{0915}"), .none)  // DEVANAGARI KA
    }

    // MARK: Bidi

    func testBidiClasses() {
        let expected: [(Unicode.Scalar, IDNA.BidiClass)] = [
            ("a", .l), ("ü", .l), ("\u{05D0}", .r), ("\u{0628}", .r), ("\u{0780}", .r), ("\u{07CA}", .r), ("\u{1E900}", .r),
            ("\u{0661}", .an), ("\u{10D31}", .an), ("1", .en), ("\u{06F1}", .en), ("-", .es), ("\u{0301}", .nsm), ("\u{064E}", .nsm),
            ("\u{200C}", .bn), ("\u{200D}", .bn), ("\u{02B9}", .on), ("\u{0CBF}", .l), ("\u{0966}", .l), ("\u{07C0}", .r),
            ("\u{0915}", .l), ("\u{4F8B}", .l),
        ]
        for (scalar, bidi) in expected { XCTAssertEqual(IDNA.bidiClass(scalar), bidi, "U+\(String(scalar.value, radix: 16))") }
    }

    func testRightToLeftNamesThatMeetTheRule() {
        assertConverts("שלום.example")  // Hebrew, then a left-to-right label
        assertConverts("مثال.إختبار")  // Arabic, both labels
        assertConverts("مثال1.example")  // ends with a European digit (condition 3)
        assertConverts("مثال١.example")  // ends with an Arabic-Indic digit
        assertConverts("של-ום.example")  // a hyphen (ES) inside
        assertConverts("שלום\u{05B0}.example")  // a mark (NSM) after the last letter (condition 3)
        assertConverts("ߒߞߏ.example")  // NKo
        assertConverts("ދިވެހި.example")  // Thaana, marks inside
    }

    func testRightToLeftNamesThatBreakTheRule() {
        assertRefuses("1مثال.example", ["does not start with a letter", "Bidi rule"])  // condition 1
        assertRefuses("שaלום.example", ["mixes left-to-right letters"])  // condition 2
        assertRefuses("שלום-\u{05D0}\u{0661}1.example", ["mixes European and Arabic-Indic digits"])  // condition 4
        assertRefuses("ü١.example", ["Arabic-Indic digits into a left-to-right label"])  // condition 5; AN makes it a Bidi name
        assertRefuses("üש.example", ["right-to-left letters"])  // condition 5
        assertRefuses("שלום.aʹ", ["does not end with a letter or a European digit"])  // condition 6 (ʹ is ON)
        // Condition 1 holds for every label of a Bidi name, ASCII labels too.
        assertRefuses("שלום.1example", ["label \"1example\"", "does not start with a letter"])
        assertRefuses("123.שלום", ["label \"123\"", "does not start with a letter"])
    }

    func testLeftToRightNamesAreNotHeldToTheRule() {
        XCTAssertEqual(try IDNA.toASCII("bücher.1example").get(), "xn--bcher-kva.1example")
        XCTAssertEqual(try IDNA.toASCII("bücher.aʹ").get().hasPrefix("xn--bcher-kva."), true)
    }

    // MARK: Fuzz

    /// A second statement of RFC 5893 §2, as regular expressions over one letter per class.
    private func referenceBidiVerdict(_ labels: [[IDNA.BidiClass]]) -> Bool {
        func letter(_ bidi: IDNA.BidiClass) -> Character {
            switch bidi {
            case .l: "L"
            case .r: "R"
            case .an: "A"
            case .en: "E"
            case .es: "S"
            case .cs: "C"
            case .et: "T"
            case .on: "O"
            case .bn: "B"
            case .nsm: "N"
            }
        }
        let words = labels.map { String($0.map(letter)) }
        guard words.contains(where: { $0.contains("R") || $0.contains("A") }) else { return true }
        let rightToLeft = try! Regex("^R(?:[RAESCTOBN]*[RAE])?N*$")
        let leftToRight = try! Regex("^L(?:[LESCTOBN]*[LE])?N*$")
        return words.allSatisfy { word in
            if word.wholeMatch(of: rightToLeft) != nil { return !(word.contains("A") && word.contains("E")) }
            return word.wholeMatch(of: leftToRight) != nil
        }
    }

    func testFuzzedLabelsAgreeWithTheReferenceAndRoundTrip() throws {
        // Seeded, so a failure is reproduced by its iteration number.
        var random = SplitMix64(seed: 0x5EED_1DA5)
        func next() -> UInt64 { random.next() }
        let alphabet: [Unicode.Scalar] = [
            "a", "z", "ü", "é", "1", "9", "-", "\u{0301}", "\u{05D0}", "\u{05E9}", "\u{05B0}", "\u{0628}", "\u{0627}", "\u{062F}",
            "\u{0621}", "\u{064E}", "\u{0661}", "\u{06F1}", "\u{0780}", "\u{07CA}", "\u{0915}", "\u{094D}", "\u{200C}", "\u{200D}",
            "\u{02B9}", "\u{4F8B}",
        ]
        var accepted = 0
        var refused = 0
        for iteration in 0..<3000 {
            let labelCount = 1 + Int(next() % 2)
            var labels: [String] = []
            for _ in 0..<labelCount {
                var scalars = String.UnicodeScalarView()
                for _ in 0..<(1 + Int(next() % 6)) { scalars.append(alphabet[Int(next() % UInt64(alphabet.count))]) }
                labels.append(String(scalars))
            }
            // A non-ASCII label is needed for the conversion to look at the name at all.
            if labels.allSatisfy({ $0.unicodeScalars.allSatisfy(\.isASCII) }) { labels[0] += "ü" }
            let host = labels.joined(separator: ".")
            let mapped = host.precomposedStringWithCompatibilityMapping.lowercased().precomposedStringWithCanonicalMapping
                .split(separator: ".", omittingEmptySubsequences: false).map(String.init)
            switch IDNA.toASCII(host) {
            case .success(let ascii):
                accepted += 1
                XCTAssertTrue(referenceBidiVerdict(mapped.map { $0.unicodeScalars.map(IDNA.bidiClass) }), "\(iteration): \(host)")
                let encoded = ascii.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
                XCTAssertEqual(encoded.count, mapped.count, "\(iteration): \(host)")
                for (aLabel, label) in zip(encoded, mapped) {
                    guard aLabel.hasPrefix("xn--") else {
                        XCTAssertEqual(aLabel, label, "\(iteration): \(host)")
                        continue
                    }
                    let decoded = try XCTUnwrap(IDNA.decodePunycode(String(aLabel.dropFirst(4))), "\(iteration): \(aLabel)")
                    XCTAssertEqual(String(String.UnicodeScalarView(decoded)), label, "\(iteration): \(host) -> \(ascii)")
                }
                // The conversion is idempotent on its own output.
                XCTAssertEqual(try IDNA.toASCII(ascii).get(), ascii)
            case .failure(let failure):
                refused += 1
                // A refusal for the Bidi rule only where the reference refuses too.
                if failure.reason.contains("Bidi rule") {
                    XCTAssertFalse(referenceBidiVerdict(mapped.map { $0.unicodeScalars.map(IDNA.bidiClass) }), "\(iteration): \(host)")
                }
            }
        }
        XCTAssertGreaterThan(accepted, 200)
        XCTAssertGreaterThan(refused, 200)
    }

    func testPunycodeDecodesRFC3492Samples() {
        // RFC 3492 §7.1 (B) and (L), and the package's own examples.
        XCTAssertEqual(IDNA.decodePunycode("bcher-kva").map { String(String.UnicodeScalarView($0)) }, "bücher")
        XCTAssertEqual(
            IDNA.decodePunycode("ihqwcrb4cv8a8dqg056pqjye").map { String(String.UnicodeScalarView($0)) }, "他们为什么不说中文")
        XCTAssertEqual(IDNA.decodePunycode("3B-ww4c5e180e575a65lsy2b").map { String(String.UnicodeScalarView($0)) }, "3年B組金八先生")
        XCTAssertNil(IDNA.decodePunycode("bcher-kv!"))
        XCTAssertNil(IDNA.decodePunycode("99999999999"))
    }
}
