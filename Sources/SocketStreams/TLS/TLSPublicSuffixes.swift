// The public suffixes a wildcard may not sit directly over (`*.co.uk`, `*.com`), for the CA/Browser
// Forum's rule (Baseline Requirements 3.2.2.6) that ``VerificationProfile/baselineRequirements`` holds a
// server's leaf to. Chromium enforces it with its built-in copy of the Public Suffix List; Apple, Go and
// rustls do not, so it is not in the default profile.
//
// - The list is the system's: Debian's and Fedora's `publicsuffix` package installs it as
//   /usr/share/publicsuffix/public_suffix_list.dat. It is not part of the package (it changes every week).
// - Only the list's ICANN section counts, as in Chromium and as the Forum advises: the PRIVATE section
//   (`s3.amazonaws.com`, `github.io`) names domains whose owners do get wildcard certificates for them.
// - Read once, when a verification first needs it. Its rules in U-labels are kept in their A-label form,
//   the form a certificate writes.
// - Without the file only the list's default rule is left: a name of one label (a top-level domain:
//   `*.com`, `*.uk`) is a public suffix, a longer one (`co.uk`) is not detected. The refusal names the file.

import Foundation

/// A name's standing in the Public Suffix List's ICANN section.
package struct PublicSuffixList: Sendable {
    /// Where the system keeps the list.
    package static let systemPath = "/usr/share/publicsuffix/public_suffix_list.dat"

    /// The system's list, read once; empty rules (the default rule only) when the file is absent.
    package static let system = PublicSuffixList(contentsOfFile: systemPath)

    /// Whether the list was read (false: only the default rule applies).
    package let isLoaded: Bool
    private var exact: Set<String> = []
    /// "ck" for the rule "*.ck".
    private var wildcardParents: Set<String> = []
    /// "www.ck" for the rule "!www.ck".
    private var exceptions: Set<String> = []

    /// Reads the list at `path`; a missing or unreadable file gives the default rule alone.
    package init(contentsOfFile path: String) {
        self.init(text: FileManager.default.contents(atPath: path).map { String(decoding: $0, as: UTF8.self) })
    }

    /// Parses the list's text (its ICANN section; the whole text when it has no section markers); nil for
    /// no list at all.
    package init(text: String?) {
        isLoaded = text != nil
        guard let text else { return }
        let hasSections = text.contains("===BEGIN ICANN DOMAINS===")
        var inICANN = !hasSections
        for line in text.split(whereSeparator: \.isNewline) {
            if line.hasPrefix("//") {
                if line.contains("===BEGIN ICANN DOMAINS===") { inICANN = true }
                if line.contains("===END ICANN DOMAINS===") { inICANN = false }
                continue
            }
            guard inICANN, let token = line.split(whereSeparator: \.isWhitespace).first else { continue }
            var rule = String(token).lowercased()
            let isException = rule.hasPrefix("!")
            if isException { rule.removeFirst() }
            let isWildcard = rule.hasPrefix("*.")
            if isWildcard { rule.removeFirst(2) }
            guard case .success(let ascii) = IDNA.toASCII(rule), !ascii.isEmpty else { continue }
            if isException {
                exceptions.insert(ascii)
            } else if isWildcard {
                wildcardParents.insert(ascii)
            } else {
                exact.insert(ascii)
            }
        }
    }

    /// Whether `name` (A-labels, any case, a trailing period ignored) is itself a public suffix: listed, or
    /// one label under a wildcard rule and not an exception, or a single label (the list's default rule "*").
    package func isPublicSuffix(_ name: String) -> Bool {
        var name = name.lowercased()
        if name.hasSuffix(".") { name.removeLast() }
        guard !name.isEmpty else { return true }
        if exceptions.contains(name) { return false }
        if exact.contains(name) { return true }
        guard let dot = name.firstIndex(of: ".") else { return true }
        return wildcardParents.contains(String(name[name.index(after: dot)...]))
    }

    /// The first wildcard among `bases` (what follows each "*.") that sits directly over a public suffix,
    /// with the reason, for the refusal.
    package func wildcardOverPublicSuffix(_ bases: [String]) -> String? {
        guard let base = bases.first(where: isPublicSuffix) else { return nil }
        let source =
            isLoaded
            ? "a public suffix in \(Self.systemPath)"
            : "a top-level domain (\(Self.systemPath) is absent, so only single labels are known as public suffixes)"
        return "a wildcard over a public suffix (\"*.\(base)\": \(base) is \(source); BR 3.2.2.6)"
    }
}
