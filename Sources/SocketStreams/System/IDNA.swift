// Internationalised host names: a host given with non-ASCII labels (U-labels, "bücher.example") becomes
// its A-label form ("xn--bcher-kva.example") once, where the pair is made, and that is the name the
// resolver, SNI, certificate matching, proxies and error messages see, as on Apple platforms.
//
// The parts of UTS 46 (IDNA compatibility processing, non-transitional, i.e. IDNA 2008) a host name
// needs, and RFC 3492's Punycode, written here rather than taken from libidn2: its headers are a
// Debian package (libidn2-dev) every build machine would need.
// - Mapping: the ideographic and full-width full stops (U+3002, U+FF0E, U+FF61) separate labels;
//   the name is compatibility-composed (NFKC) and lower-cased, then composed again (NFC).
//   Non-transitional: ß, ς and the joiners are kept, not mapped to "ss", "σ" or nothing.
// - Validity of each U-label (RFC 5891 §5.4, simplified): letters, combining marks, decimal digits and
//   hyphens only (so no spaces, symbols, emoji or format characters such as the joiners, which IDNA
//   2008 allows only in contexts not checked here); not starting with a combining mark; no hyphen
//   first, last or in the third and fourth positions. ASCII labels are left as they are.
// - Lengths: a label of at most 63 bytes once encoded, a name of at most 253.
// Bidi rules (RFC 5893) are not checked: a right-to-left name that breaks them is converted as given.
//
// A name that fails is kept as given, and the resolver refuses it with the reason, before anything is
// dialled.

import Foundation

package enum IDNA {
    /// Why a host name has no A-label form.
    package struct Failure: Error, Equatable, CustomStringConvertible {
        /// "label "☃" holds U+2603, which a host name may not contain (IDNA 2008)".
        package let reason: String
        package var description: String { reason }
    }

    /// The ASCII form of `host`: unchanged when it is ASCII (an address literal, a DNS name, a name
    /// already in A-labels), else with each non-ASCII label mapped and Punycode-encoded as `xn--…`.
    package static func toASCII(_ host: String) -> Result<String, Failure> {
        if host.utf8.allSatisfy({ $0 < 0x80 }) { return .success(host) }
        var dotted = String.UnicodeScalarView()
        for scalar in host.unicodeScalars {
            switch scalar.value {
            case 0x3002, 0xFF0E, 0xFF61: dotted.append(".")
            default: dotted.append(scalar)
            }
        }
        let mapped = String(dotted).precomposedStringWithCompatibilityMapping.lowercased().precomposedStringWithCanonicalMapping
        var labels = mapped.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        let rooted = labels.count > 1 && labels.last == ""
        if rooted { labels.removeLast() }
        var encoded: [String] = []
        for label in labels {
            guard !label.isEmpty else { return .failure(Failure(reason: "\"\(host)\" has an empty label")) }
            if label.utf8.allSatisfy({ $0 < 0x80 }) {
                encoded.append(label)
                continue
            }
            if let problem = problem(in: label) { return .failure(Failure(reason: "label \"\(label)\" \(problem) (IDNA 2008)")) }
            guard let punycode = punycode(Array(label.unicodeScalars)) else {
                return .failure(Failure(reason: "label \"\(label)\" is too long to encode"))
            }
            let aLabel = "xn--" + punycode
            guard aLabel.utf8.count <= 63 else {
                return .failure(Failure(reason: "label \"\(label)\" is \(aLabel.utf8.count) bytes as an A-label, more than 63"))
            }
            encoded.append(aLabel)
        }
        let name = encoded.joined(separator: ".")
        guard name.utf8.count <= 253 else {
            return .failure(Failure(reason: "\"\(host)\" is \(name.utf8.count) bytes in A-labels, more than 253"))
        }
        return .success(rooted ? name + "." : name)
    }

    /// The A-label form, or `host` unchanged when it has none (the resolver then refuses it with the reason).
    package static func asciiOrSame(_ host: String) -> String {
        (try? toASCII(host).get()) ?? host
    }

    /// What makes a non-ASCII label invalid, nil when nothing does.
    private static func problem(in label: String) -> String? {
        let scalars = Array(label.unicodeScalars)
        if scalars.first == "-" || scalars.last == "-" { return "starts or ends with a hyphen" }
        if scalars.count >= 4 && scalars[2] == "-" && scalars[3] == "-" { return "has hyphens in its third and fourth places" }
        if let first = scalars.first, isMark(first) { return "starts with a combining mark (U+\(hex(first)))" }
        for scalar in scalars {
            if scalar == "-" || isMark(scalar) { continue }
            switch scalar.properties.generalCategory {
            case .lowercaseLetter, .otherLetter, .modifierLetter, .decimalNumber: continue
            default: return "holds U+\(hex(scalar)), which a host name may not contain"
            }
        }
        return nil
    }

    private static func isMark(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.properties.generalCategory {
        case .nonspacingMark, .spacingMark, .enclosingMark: return true
        default: return false
        }
    }

    private static func hex(_ scalar: Unicode.Scalar) -> String {
        let digits = String(scalar.value, radix: 16, uppercase: true)
        return String(repeating: "0", count: max(0, 4 - digits.count)) + digits
    }

    /// RFC 3492 §6.3: the Punycode of `input` (without the "xn--"), nil on overflow.
    static func punycode(_ input: [Unicode.Scalar]) -> String? {
        let base = 36
        let tMin = 1
        let tMax = 26
        let codePoints = input.map { Int($0.value) }
        var basic = String.UnicodeScalarView()
        basic.append(contentsOf: input.filter(\.isASCII))
        var output = String(basic)
        let basicCount = basic.count
        var handled = basicCount
        if basicCount > 0 { output.append("-") }
        var n = 0x80
        var delta = 0
        var bias = 72

        func digit(_ value: Int) -> Character {
            Character(Unicode.Scalar(UInt8(value < 26 ? 0x61 + value : 0x30 + value - 26)))
        }
        func adapt(_ delta: Int, _ points: Int, _ first: Bool) -> Int {
            var delta = first ? delta / 700 : delta / 2
            delta += delta / points
            var k = 0
            while delta > ((base - tMin) * tMax) / 2 {
                delta /= base - tMin
                k += base
            }
            return k + (base - tMin + 1) * delta / (delta + 38)
        }

        while handled < codePoints.count {
            guard let next = codePoints.filter({ $0 >= n }).min() else { return nil }
            let (step, overflow) = (next - n).multipliedReportingOverflow(by: handled + 1)
            guard !overflow, delta <= Int(Int32.max) - step else { return nil }
            delta += step
            n = next
            for point in codePoints {
                if point < n { delta += 1 }
                guard point == n else { continue }
                var q = delta
                var k = base
                while true {
                    let t = k <= bias ? tMin : (k >= bias + tMax ? tMax : k - bias)
                    if q < t { break }
                    output.append(digit(t + (q - t) % (base - t)))
                    q = (q - t) / (base - t)
                    k += base
                }
                output.append(digit(q))
                bias = adapt(delta, handled + 1, handled == basicCount)
                delta = 0
                handled += 1
            }
            delta += 1
            n += 1
        }
        return output
    }
}
