import Foundation
import SocketStreamsTestSupport
import XCTest

/// The layer order of `Sources/SocketStreams`, held by a test rather than by module boundaries: a
/// file in one layer's folder may name what its own layer and the layers below it declare, never
/// what a higher layer declares. (Separate targets would hold it in the compiler, at the cost of
/// `package` access and cross-module calls on the hot path; Guides/Architecture.md says why.)
final class LayerOrderTests: XCTestCase {
    /// Bottom first; the same order as Guides/Architecture.md's layer table.
    static let layers = [
        "System", "EventLoop", "Datagram", "Transport", "TLS", "Proxy", "Connection", "Properties", "Streams", "API", "Operations",
    ]

    static let sources = packageRoot.appendingPathComponent("Sources/SocketStreams", isDirectory: true)

    func testNoLayerNamesAHigherOne() throws {
        var files: [String: [(path: String, text: String)]] = [:]
        for layer in Self.layers {
            let folder = Self.sources.appendingPathComponent(layer, isDirectory: true)
            let enumerator = try XCTUnwrap(FileManager.default.enumerator(atPath: folder.path))
            for case let name as String in enumerator where name.hasSuffix(".swift") {
                let text = try String(contentsOf: folder.appendingPathComponent(name), encoding: .utf8)
                files[layer, default: []].append(("\(layer)/\(name)", text))
            }
            XCTAssertFalse(files[layer, default: []].isEmpty, "no Swift file in \(layer)/")
        }
        let violations = LayerCheck.upwardReferences(layers: Self.layers, files: files)
        XCTAssertEqual(violations, [], "a lower layer names a higher one:\n" + violations.joined(separator: "\n"))
    }

    /// Every folder is in the table (a new folder must be given its place), and the guide's layer
    /// table lists them in the same order.
    func testTheTableCoversEveryFolderAndMatchesTheGuide() throws {
        let folders = try FileManager.default.contentsOfDirectory(atPath: Self.sources.path)
            .filter { !$0.hasSuffix(".docc") && !$0.hasPrefix(".") }
        XCTAssertEqual(Set(folders), Set(Self.layers))
        let guide = try String(contentsOf: packageRoot.appendingPathComponent("Guides/Architecture.md"), encoding: .utf8)
        // Rows of the layer table: "| n | Layer | `Folder/` | …", bottom first.
        let rows = guide.split(separator: "\n").compactMap { line -> String? in
            let cells = line.split(separator: "|").map { $0.trimmingCharacters(in: .whitespaces) }
            guard cells.count >= 3, Int(cells[0]) != nil, cells[2].hasPrefix("`"), cells[2].hasSuffix("/`") else { return nil }
            return String(cells[2].dropFirst().dropLast(2))
        }
        XCTAssertEqual(rows, Self.layers, "Guides/Architecture.md's layer table")
    }

    /// The check itself finds an upward reference, and is not fooled by comments and strings.
    func testTheCheckFindsAnUpwardReference() {
        let files: [String: [(path: String, text: String)]] = [
            "Low": [
                ("Low/A.swift", "struct LowThing {}\nlet x = HighThing()  // HighThing in a comment is fine\n"),
                ("Low/B.swift", "/// Mentions HighThing in a doc comment.\nlet y = \"HighThing\"\n"),
            ],
            "High": [("High/C.swift", "public final class HighThing { let low = LowThing() }\n")],
        ]
        XCTAssertEqual(LayerCheck.upwardReferences(layers: ["Low", "High"], files: files), ["Low/A.swift names HighThing (High)"])
        XCTAssertEqual(LayerCheck.upwardReferences(layers: ["High", "Low"], files: files), ["High/C.swift names LowThing (Low)"])
    }

    /// A member a higher layer adds to a lower layer's type, in an extension, is as much out of reach
    /// as its top-level names: `.describe` below is caught, while `.size` (the type's own), a name the
    /// lower layer declares itself, and the higher layer's own use are not.
    func testTheCheckFindsAMemberAddedByAHigherLayersExtension() {
        let files: [String: [(path: String, text: String)]] = [
            "Low": [
                ("Low/A.swift", "struct LowThing {\n    var size = 0\n}\nfunc f(_ t: LowThing) -> Int { t.size }\n"),
                ("Low/B.swift", "func g(_ t: LowThing) -> String {\n    t.describe() + \"\\(t.size)\"\n}\n"),
                ("Low/C.swift", "struct Other {\n    func label() -> String { \"\" }\n}\nlet l = Other().label()\n"),
            ],
            "High": [
                (
                    "High/D.swift",
                    "extension LowThing: CustomStringConvertible\n    where Self: Sendable\n{\n"
                        + "    func describe() -> String { \"\" }\n    static let label = 1\n    var description: String { describe() }\n}\n"
                        + "let d = LowThing().describe()\n"
                )
            ],
        ]
        XCTAssertEqual(LayerCheck.upwardReferences(layers: ["Low", "High"], files: files), ["Low/B.swift uses LowThing.describe (High)"])
        XCTAssertEqual(
            LayerCheck.extensionMembers(in: LayerCheck.code(of: files["High"]![0].text)).map { "\($0.type).\($0.member)" },
            ["LowThing.describe", "LowThing.label", "LowThing.description"])
    }
}

/// A text-level check: names declared at the top level of a layer's files (types, typealiases,
/// functions, constants), and the identifiers each file uses outside comments and string literals;
/// and members a layer adds in an extension to a lower layer's type, against the `.member` uses of
/// the layers below it that do not declare that name themselves. (A member used without the dot,
/// from inside the type, is not seen.)
enum LayerCheck {
    static func upwardReferences(layers: [String], files: [String: [(path: String, text: String)]]) -> [String] {
        var declaredIn: [String: Int] = [:]  // name → the lowest layer declaring it
        var stripped: [String: [(path: String, text: String)]] = [:]
        for (index, layer) in layers.enumerated() {
            for file in files[layer, default: []] {
                let text = code(of: file.text)
                stripped[layer, default: []].append((file.path, text))
                for name in topLevelDeclarations(in: text) { declaredIn[name] = min(declaredIn[name] ?? index, index) }
            }
        }
        // Members a layer adds, in an extension, to a type a lower layer declares: (type, layer) by name.
        var addedUpward: [String: (type: String, layer: Int)] = [:]
        // Every name each layer declares, at any depth (members, locals, cases).
        var declaredBy: [Set<String>] = Array(repeating: [], count: layers.count)
        for (index, layer) in layers.enumerated() {
            for file in stripped[layer, default: []] {
                declaredBy[index].formUnion(declaredNames(in: file.text))
                for (type, member) in extensionMembers(in: file.text) {
                    guard let typeLayer = declaredIn[type], typeLayer < index else { continue }
                    if let known = addedUpward[member], known.layer <= index { continue }
                    addedUpward[member] = (type, index)
                }
            }
        }
        var violations: [String] = []
        var declaredSoFar: Set<String> = []  // by this layer and those below it
        for (index, layer) in layers.enumerated() {
            declaredSoFar.formUnion(declaredBy[index])
            for file in stripped[layer, default: []].sorted(by: { $0.path < $1.path }) {
                var reported: Set<String> = []
                for name in identifiers(in: file.text) where !reported.contains(name) {
                    guard let owner = declaredIn[name], owner > index else { continue }
                    reported.insert(name)
                    violations.append("\(file.path) names \(name) (\(layers[owner]))")
                }
                // `.member` where only a higher layer's extension declares that member.
                for member in memberAccesses(in: file.text) where !reported.contains("." + member) {
                    guard let added = addedUpward[member], added.layer > index, !declaredSoFar.contains(member) else { continue }
                    reported.insert("." + member)
                    violations.append("\(file.path) uses \(added.type).\(member) (\(layers[added.layer]))")
                }
            }
        }
        return violations
    }

    /// The text without comments and string literals' contents.
    static func code(of text: String) -> String {
        var out = ""
        var chars = Array(text)[...]
        var inBlock = 0
        while let c = chars.first {
            if inBlock > 0 {
                if chars.starts(with: "*/") {
                    inBlock -= 1
                    chars = chars.dropFirst(2)
                } else if chars.starts(with: "/*") {
                    inBlock += 1
                    chars = chars.dropFirst(2)
                } else {
                    if c == "\n" { out.append(c) }
                    chars = chars.dropFirst()
                }
            } else if chars.starts(with: "//") {
                while let next = chars.first, next != "\n" { chars = chars.dropFirst() }
            } else if chars.starts(with: "/*") {
                inBlock = 1
                chars = chars.dropFirst(2)
            } else if chars.starts(with: "\"\"\"") {
                chars = chars.dropFirst(3)
                while !chars.isEmpty, !chars.starts(with: "\"\"\"") { chars = chars.dropFirst() }
                chars = chars.dropFirst(3)
                out.append("\"\"")
            } else if c == "\"" {
                chars = chars.dropFirst()
                while let next = chars.first, next != "\"", next != "\n" {
                    chars = chars.dropFirst(next == "\\" ? 2 : 1)
                }
                chars = chars.dropFirst()
                out.append("\"\"")
            } else {
                out.append(c)
                chars = chars.dropFirst()
            }
        }
        return out
    }

    static let keywords: Set<String> = ["class", "struct", "enum", "protocol", "actor", "typealias", "func", "let", "var"]
    static let modifiers: Set<String> = [
        "public", "internal", "private", "fileprivate", "package", "final", "nonisolated", "nonisolated(unsafe)", "indirect",
    ]

    /// Names declared at column 0 (after modifiers and attributes).
    static func topLevelDeclarations(in code: String) -> [String] {
        code.split(separator: "\n").compactMap { line -> String? in
            guard let first = line.first, first.isLetter || first == "@" else { return nil }
            var words = line.split(whereSeparator: { $0 == " " || $0 == "<" || $0 == ":" })[...]
            while let word = words.first, modifiers.contains(String(word)) || word.hasPrefix("@") { words = words.dropFirst() }
            guard let keyword = words.first, keywords.contains(String(keyword)), words.count > 1 else { return nil }
            let name = words[words.startIndex + 1].prefix { $0.isLetter || $0.isNumber || $0 == "_" }
            return name.isEmpty ? nil : String(name)
        }
    }

    /// Members declared directly inside a top-level `extension T` (functions, properties, nested
    /// types, cases): (T's outermost name, member). Initialisers and operators have no name to look for.
    static func extensionMembers(in code: String) -> [(type: String, member: String)] {
        var members: [(String, String)] = []
        var depth = 0
        var extended: String?
        for line in code.split(separator: "\n", omittingEmptySubsequences: false) {
            var words = line.split(whereSeparator: { " <:{(,=".contains($0) })[...]
            while let word = words.first, modifiers.contains(String(word)) || memberModifiers.contains(String(word)) || word.hasPrefix("@")
            {
                // `class func`: a modifier; `class Name`: a nested type.
                if word == "class", words.count > 1, !keywords.contains(String(words[words.startIndex + 1])) { break }
                words = words.dropFirst()
            }
            if depth == 0, let first = words.first {
                // A new top-level declaration ends the extension (a `where` clause on its own line does not).
                if first == "extension", words.count > 1 {
                    extended = String(words[words.startIndex + 1].prefix { $0.isLetter || $0.isNumber || $0 == "_" })
                } else if keywords.contains(String(first)) || first == "import" {
                    extended = nil
                }
            } else if depth == 1, let type = extended, let keyword = words.first,
                keywords.contains(String(keyword)) || keyword == "case", words.count > 1
            {
                let name = words[words.startIndex + 1].prefix { $0.isLetter || $0.isNumber || $0 == "_" }
                if !name.isEmpty { members.append((type, String(name))) }
            }
            for c in line {
                if c == "{" { depth += 1 } else if c == "}" { depth = max(0, depth - 1) }
            }
        }
        return members
    }

    static let memberModifiers: Set<String> = [
        "static", "class", "override", "mutating", "nonmutating", "convenience", "required", "lazy", "weak", "unowned", "dynamic",
    ]

    /// Every name declared anywhere in `code`: after `func`, `var`, `let`, `case` (not `case .x`),
    /// `typealias` and the type keywords.
    static func declaredNames(in code: String) -> Set<String> {
        let tokens = identifierTokens(in: code)
        var names: Set<String> = []
        for (index, token) in tokens.enumerated() where index + 1 < tokens.count {
            guard keywords.contains(token.name) || token.name == "case" else { continue }
            let next = tokens[index + 1]
            if !next.afterDot { names.insert(next.name) }
        }
        return names
    }

    /// The names used as `.name`: member accesses and implicit members.
    static func memberAccesses(in code: String) -> [String] {
        identifierTokens(in: code).filter(\.afterDot).map(\.name)
    }

    static func identifiers(in code: String) -> [String] {
        identifierTokens(in: code).map(\.name)
    }

    /// The identifiers in order, each with whether a `.` came right before it.
    static func identifierTokens(in code: String) -> [(name: String, afterDot: Bool)] {
        var tokens: [(String, Bool)] = []
        var current = ""
        var previous: Character = " "
        var afterDot = false
        for c in code {
            if c.isLetter || c == "_" || (c.isNumber && !current.isEmpty) {
                if current.isEmpty { afterDot = previous == "." }
                current.append(c)
            } else {
                if !current.isEmpty { tokens.append((current, afterDot)) }
                current = ""
            }
            previous = c
        }
        if !current.isEmpty { tokens.append((current, afterDot)) }
        return tokens
    }
}
