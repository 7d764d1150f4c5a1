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
//   hyphens only (so no spaces, symbols, emoji or format characters), and ZERO WIDTH NON-JOINER and
//   JOINER where RFC 5892's CONTEXTJ rules allow them (Appendix A.1, A.2: after a virama, and the
//   non-joiner also between a letter that joins on its left and one that joins on its right, combining
//   marks between them ignored); not starting with a combining mark; no hyphen first, last or in the
//   third and fourth positions. ASCII labels are left as they are.
// - The Bidi rule (RFC 5893 §2), as UTS 46's CheckBidi applies it: when a label of the name holds a
//   right-to-left letter or an Arabic-Indic digit, every label must meet the rule's six conditions.
// - Lengths: a label of at most 63 bytes once encoded, a name of at most 253.
//
// The standard library gives a scalar's general category and canonical combining class but neither its
// Bidi_Class nor its Joining_Type, so both are derived here (see `bidiClass` and `joiningType`): the Bidi
// classes of every letter, mark, digit and hyphen a label can hold agree with UnicodeData's (checked
// against Unicode 14's, every code point); the joining types are ArabicShaping's for the Arabic and
// Syriac letters and, for the other joining scripts (NKo, Mongolian, Mandaic, Adlam, …), dual-joining for
// every letter, which can allow a non-joiner the exact table would refuse, never the other way round.
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
        if let problem = bidiProblem(labels) { return .failure(Failure(reason: problem)) }
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
        for (index, scalar) in scalars.enumerated() {
            if scalar == "-" || isMark(scalar) { continue }
            if scalar.value == 0x200C || scalar.value == 0x200D {
                if joinerAllowed(at: index, in: scalars) { continue }
                let which = scalar.value == 0x200C ? "ZERO WIDTH NON-JOINER" : "ZERO WIDTH JOINER"
                let context =
                    scalar.value == 0x200C
                    ? "after a virama or between letters that join it on both sides" : "only after a virama"
                return "holds U+\(hex(scalar)) (\(which)) where RFC 5892's CONTEXTJ rule does not allow it (\(context))"
            }
            switch scalar.properties.generalCategory {
            case .lowercaseLetter, .otherLetter, .modifierLetter, .decimalNumber: continue
            default: return "holds U+\(hex(scalar)), which a host name may not contain"
            }
        }
        return nil
    }

    // MARK: CONTEXTJ (RFC 5892 Appendix A.1 and A.2)

    /// Whether the joiner at `index` has the context RFC 5892 asks for: a virama (canonical combining
    /// class 9) right before it, or, for ZERO WIDTH NON-JOINER only, a left- or dual-joining letter before
    /// it and a right- or dual-joining one after it, transparent characters (marks) between them skipped.
    static func joinerAllowed(at index: Int, in scalars: [Unicode.Scalar]) -> Bool {
        if index > 0 && scalars[index - 1].properties.canonicalCombiningClass == .virama { return true }
        guard scalars[index].value == 0x200C else { return false }
        var before = index - 1
        while before >= 0 && joiningType(scalars[before]) == .transparent { before -= 1 }
        guard before >= 0, [.left, .dual].contains(joiningType(scalars[before])) else { return false }
        var after = index + 1
        while after < scalars.count && joiningType(scalars[after]) == .transparent { after += 1 }
        return after < scalars.count && [.right, .dual].contains(joiningType(scalars[after]))
    }

    /// Unicode's Joining_Type, as far as the non-joiner's rule needs it.
    enum JoiningType: Equatable {
        case dual, left, right, transparent, none
    }

    /// Joining_Type of `scalar`: transparent for combining marks and format characters (the joiners
    /// aside); ArabicShaping's right-joining and non-joining letters of the Arabic and Syriac blocks and
    /// dual for their others; dual for every letter of the other joining scripts (an approximation that
    /// errs towards allowing); none elsewhere (Latin, Devanagari, Han…).
    static func joiningType(_ scalar: Unicode.Scalar) -> JoiningType {
        let value = scalar.value
        if value == 0x200C || value == 0x200D { return .none }
        switch scalar.properties.generalCategory {
        case .nonspacingMark, .enclosingMark, .format: return .transparent
        case .otherLetter, .lowercaseLetter, .modifierLetter: break
        default: return .none
        }
        func within(_ ranges: [ClosedRange<UInt32>]) -> Bool { ranges.contains { $0.contains(value) } }
        switch value {
        case 0x0620...0x06FF, 0x0750...0x077F, 0x0870...0x08FF:
            // Arabic, Arabic Supplement, Arabic Extended-B and -A.
            if within([0x0621...0x0621, 0x0674...0x0674, 0x0640...0x0640, 0x08AD...0x08AD]) { return .none }
            if within(arabicRightJoining) { return .right }
            return .dual
        case 0x0710...0x074F, 0x0860...0x086F:
            // Syriac, Syriac Supplement.
            if within(syriacRightJoining) { return .right }
            return .dual
        case 0x07CA...0x07EA, 0x0840...0x085F, 0x1800...0x18AF, 0xA840...0xA87F, 0x10AC0...0x10AFF, 0x10B80...0x10BAF,
            0x10D00...0x10D3F, 0x10F30...0x10F6F, 0x10F70...0x10FAF, 0x10FB0...0x10FDF, 0x1E900...0x1E95F:
            // NKo, Mandaic, Mongolian, Phags-pa, Manichaean, Psalter Pahlavi, Hanifi Rohingya, Sogdian,
            // Old Uyghur, Chorasmian, Adlam.
            return .dual
        default:
            return .none
        }
    }

    /// ArabicShaping's right-joining letters (alef, dal, reh, waw, teh marbuta and their variants).
    private static let arabicRightJoining: [ClosedRange<UInt32>] = [
        0x0622...0x0625, 0x0627...0x0627, 0x0629...0x0629, 0x062F...0x0632, 0x0648...0x0648, 0x0671...0x0673, 0x0675...0x0677,
        0x0688...0x0699, 0x06C0...0x06C0, 0x06C3...0x06CB, 0x06CD...0x06CD, 0x06CF...0x06CF, 0x06D2...0x06D3, 0x06D5...0x06D5,
        0x06EE...0x06EF, 0x0759...0x075B, 0x076B...0x076C, 0x0771...0x0771, 0x0773...0x0774, 0x0778...0x0779, 0x08AA...0x08AC,
        0x08AE...0x08AE, 0x08B1...0x08B2, 0x08B9...0x08B9,
    ]

    /// ArabicShaping's right-joining Syriac letters (alaph, dalath, he, waw, zain, yudh he, sadhe, resh, taw…).
    private static let syriacRightJoining: [ClosedRange<UInt32>] = [
        0x0710...0x0710, 0x0715...0x0719, 0x071E...0x071E, 0x0728...0x0728, 0x072A...0x072A, 0x072C...0x072C, 0x072F...0x072F,
        0x074D...0x074D, 0x0867...0x0867, 0x0869...0x0869, 0x086B...0x086B,
    ]

    // MARK: The Bidi rule (RFC 5893 §2)

    /// The Bidi classes (UAX #9) the rule tells apart. R stands for R and AL, which the rule treats alike.
    enum BidiClass: Equatable {
        case l, r, an, en, es, cs, et, on, bn, nsm
    }

    /// Bidi_Class of a scalar a valid label can hold (a letter, mark, decimal digit, hyphen or joiner):
    /// R for the letters, marks that are not combining and digits of the right-to-left blocks (Hebrew to
    /// Arabic Extended-A, their presentation forms, the right-to-left ranges of planes 1), AN for the
    /// Arabic-Indic and Hanifi Rohingya digits, EN for the European and Extended Arabic-Indic digits (and
    /// their full-width and mathematical forms), NSM for combining marks, ON for the modifier letters
    /// UnicodeData gives ON, ES for the hyphen, BN for the joiners, L otherwise.
    static func bidiClass(_ scalar: Unicode.Scalar) -> BidiClass {
        let value = scalar.value
        if value == 0x200C || value == 0x200D { return .bn }
        if value == 0x2D { return .es }
        let rightToLeft =
            (0x0590...0x08FF).contains(value) || (0xFB1D...0xFDFF).contains(value) || (0xFE70...0xFEFF).contains(value)
            || (0x10800...0x10FFF).contains(value) || (0x1E800...0x1EFFF).contains(value)
        switch scalar.properties.generalCategory {
        case .nonspacingMark, .enclosingMark:
            // Five vowel signs UnicodeData classes as L although they are non-spacing (Kannada, Zanabazar Square, Bhaiksuki).
            return [0x0CBF, 0x0CC6, 0x11A07, 0x11A08, 0x11C3F].contains(value) ? .l : .nsm
        case .decimalNumber:
            if (0x30...0x39).contains(value) || (0x06F0...0x06F9).contains(value) || (0xFF10...0xFF19).contains(value)
                || (0x1D7CE...0x1D7FF).contains(value) || (0x1FBF0...0x1FBF9).contains(value)
            {
                return .en
            }
            if (0x0660...0x0669).contains(value) || (0x10D30...0x10D39).contains(value) { return .an }
            return rightToLeft ? .r : .l
        case .modifierLetter:
            if [
                0x02B9...0x02BA, 0x02C6...0x02CF, 0x02EC...0x02EC, 0x0374...0x0374, 0x2E2F...0x2E2F, 0xA67F...0xA67F, 0xA717...0xA71F,
                0xA788...0xA788,
            ].contains(where: { $0.contains(value) }) {
                return .on
            }
            return rightToLeft ? .r : .l
        default:
            return rightToLeft ? .r : .l
        }
    }

    /// Whether `labels` make a Bidi domain name (RFC 5893 §1.4: a label holds R, AL or AN) that breaks
    /// the Bidi rule in one of its labels; the reason, nil when the name passes or is not a Bidi name.
    static func bidiProblem(_ labels: [String]) -> String? {
        let classes = labels.map { $0.unicodeScalars.map(bidiClass) }
        guard classes.contains(where: { $0.contains(.r) || $0.contains(.an) }) else { return nil }
        for (label, kinds) in zip(labels, classes) {
            if let problem = bidiRuleProblem(kinds) {
                return "label \"\(label)\" of a right-to-left name \(problem) (RFC 5893's Bidi rule)"
            }
        }
        return nil
    }

    /// The six conditions of RFC 5893 §2 on one label's classes: the first it breaks, nil when none.
    static func bidiRuleProblem(_ kinds: [BidiClass]) -> String? {
        guard let first = kinds.first else { return nil }
        guard first == .l || first == .r else { return "does not start with a letter" }  // 1
        let tail = kinds.reversed().drop { $0 == .nsm }
        if first == .r {
            // 2: R, AL, AN, EN, ES, CS, ET, ON, BN, NSM only.
            if kinds.contains(.l) { return "mixes left-to-right letters into a right-to-left label" }
            // 3: ends with R, AL, EN or AN, then only NSM.
            guard let last = tail.first, [.r, .en, .an].contains(last) else {
                return "does not end with a right-to-left letter or a digit"
            }
            // 4: not both EN and AN.
            if kinds.contains(.en) && kinds.contains(.an) { return "mixes European and Arabic-Indic digits" }
        } else {
            // 5: L, EN, ES, CS, ET, ON, BN, NSM only.
            if kinds.contains(.r) || kinds.contains(.an) {
                return "mixes right-to-left letters or Arabic-Indic digits into a left-to-right label"
            }
            // 6: ends with L or EN, then only NSM.
            guard let last = tail.first, last == .l || last == .en else { return "does not end with a letter or a European digit" }
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

    /// RFC 3492 §6.2: the code points whose Punycode is `text` (without the "xn--"), nil when it is not
    /// Punycode (a character outside its digits, an overflow, a code point out of range).
    static func decodePunycode(_ text: String) -> [Unicode.Scalar]? {
        let base = 36
        let tMin = 1
        let tMax = 26
        let bytes = Array(text.utf8)
        guard bytes.allSatisfy({ $0 < 0x80 }) else { return nil }
        var output: [Int] = []
        var rest = bytes[...]
        if let separator = bytes.lastIndex(of: UInt8(ascii: "-")) {
            output = bytes[..<separator].map(Int.init)
            rest = bytes[(separator + 1)...]
        }
        func value(_ byte: UInt8) -> Int? {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"): return Int(byte - UInt8(ascii: "a"))
            case UInt8(ascii: "A")...UInt8(ascii: "Z"): return Int(byte - UInt8(ascii: "A"))
            case UInt8(ascii: "0")...UInt8(ascii: "9"): return Int(byte - UInt8(ascii: "0")) + 26
            default: return nil
            }
        }
        var n = 0x80
        var i = 0
        var bias = 72
        var cursor = rest.startIndex
        while cursor < rest.endIndex {
            let oldI = i
            var weight = 1
            var k = base
            while true {
                guard cursor < rest.endIndex, let digit = value(rest[cursor]) else { return nil }
                cursor += 1
                let (product, overflow) = digit.multipliedReportingOverflow(by: weight)
                guard !overflow, i <= Int(Int32.max) - product else { return nil }
                i += product
                let t = k <= bias ? tMin : (k >= bias + tMax ? tMax : k - bias)
                if digit < t { break }
                weight *= base - t
                guard weight <= Int(Int32.max) else { return nil }
                k += base
            }
            let count = output.count + 1
            var delta = oldI == 0 ? (i - oldI) / 700 : (i - oldI) / 2
            delta += delta / count
            var shift = 0
            while delta > ((base - tMin) * tMax) / 2 {
                delta /= base - tMin
                shift += base
            }
            bias = shift + (base - tMin + 1) * delta / (delta + 38)
            n += i / count
            guard n <= 0x10FFFF else { return nil }
            i %= count
            output.insert(n, at: i)
            i += 1
        }
        let scalars = output.compactMap { Unicode.Scalar(UInt32($0)) }
        return scalars.count == output.count ? scalars : nil
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
