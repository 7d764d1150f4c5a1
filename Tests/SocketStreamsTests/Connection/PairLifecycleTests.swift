@testable import SocketStreams
import SocketStreamsTestSupport
import XCTest

/// The pair's lifecycle as a table: every state against every event, legal or not, with the state
/// it moves to and the action the connection carries out; no sockets.
final class PairLifecycleTests: XCTestCase {
    typealias Lifecycle = PairLifecycle<Int, String>

    /// The six states (the connector is 1, the pair's error "e").
    static let states: [Lifecycle.State] = [.idle, .connecting(1), .negotiating, .live, .failed("e"), .closed]

    static let events: [Lifecycle.Event] = [
        .open, .dial(2), .connected, .tcpUp(stages: false), .tcpUp(stages: true), .stageAdded, .stagesDone, .fail("f"),
        .connectFailed, .deadlinePassed, .scheduleFailed("s"), .bothHalvesGone,
    ]

    /// state × event → "next action" ("=" for an unchanged state), or "illegal".
    static let table: [[String]] = [
        // idle
        [
            "= start", "connecting(2) none", "illegal", "live goLive", "negotiating negotiate", "= queueStage", "illegal",
            #"failed("f") failed(wasLive: false, cancel: nil)"#, "= none", "= none", #"failed("s") none"#, "closed tearDown(cancel: nil)",
        ],
        // connecting(1)
        [
            "= none", "illegal", "= adopt", "live goLive", "negotiating negotiate", "= queueStage", "illegal",
            #"failed("f") failed(wasLive: false, cancel: Optional(1))"#, "= fail", "= timeOutConnect(1)", "= fail",
            "closed tearDown(cancel: Optional(1))",
        ],
        // negotiating
        [
            "= completeOpen", "illegal", "illegal", "illegal", "illegal", "= queueStage", "live goLive",
            #"failed("f") failed(wasLive: false, cancel: nil)"#, "= none", "= timeOutHandshake", "= fail",
            "closed tearDown(cancel: nil)",
        ],
        // live
        [
            "= completeOpenLive", "illegal", "illegal", "illegal", "illegal", "negotiating negotiate", "illegal",
            #"failed("f") failed(wasLive: true, cancel: nil)"#, "= none", "= none", "= fail", "closed tearDown(cancel: nil)",
        ],
        // failed("e")
        [
            #"= reportFailure("e")"#, "illegal", "= discard", "illegal", "illegal", "= refuse", "illegal",
            #"failed("f") failed(wasLive: false, cancel: nil)"#, "= none", "= none", "= none", "closed tearDown(cancel: nil)",
        ],
        // closed
        [
            "= none", "illegal", "= discard", "illegal", "illegal", "= refuse", "illegal", "= failed(wasLive: false, cancel: nil)",
            "= none", "= none", "= none", "illegal",
        ],
    ]

    static func describe(_ outcome: (next: Lifecycle.State?, action: Lifecycle.Action)?) -> String {
        guard let outcome else { return "illegal" }
        return "\(outcome.next.map { String(describing: $0) } ?? "=") \(outcome.action)"
    }

    func testEveryStateAgainstEveryEvent() {
        XCTAssertEqual(Self.table.count, Self.states.count)
        var legal = 0
        for (state, row) in zip(Self.states, Self.table) {
            XCTAssertEqual(row.count, Self.events.count, "\(state)")
            for (event, expected) in zip(Self.events, row) {
                let outcome = Lifecycle.transition(state, event)
                XCTAssertEqual(Self.describe(outcome), expected, "\(state) + \(event)")
                if outcome != nil { legal += 1 }
            }
        }
        XCTAssertEqual(legal, 50)  // of 72: the other 22 cannot happen, and trap in debug builds
    }

    /// `handle` moves to the table's state and returns its action.
    func testHandleAppliesTheTable() {
        for (index, row) in Self.table.enumerated() {
            for (event, expected) in zip(Self.events, row) where expected != "illegal" {
                var lifecycle = Self.reach(index)
                let before = String(describing: lifecycle.state)
                let action = lifecycle.handle(event)
                let next = expected.split(separator: " ", maxSplits: 1)[0]
                XCTAssertEqual(String(describing: lifecycle.state), next == "=" ? before : String(next), "\(before) + \(event)")
                XCTAssertEqual(String(describing: action), String(expected.split(separator: " ", maxSplits: 1)[1]))
            }
        }
    }

    /// The states reached through events from `idle`, as the connection reaches them.
    static func reach(_ index: Int) -> Lifecycle {
        var lifecycle = Lifecycle()
        let paths: [[Lifecycle.Event]] = [
            [], [.open, .dial(1)], [.open, .dial(1), .connected, .tcpUp(stages: true)],
            [.open, .dial(1), .connected, .tcpUp(stages: false)], [.open, .dial(1), .fail("e")],
            [.open, .dial(1), .bothHalvesGone],
        ]
        for event in paths[index] { _ = lifecycle.handle(event) }
        return lifecycle
    }

    func testReachedStatesAreTheTablesStates() {
        for (index, state) in Self.states.enumerated() {
            XCTAssertEqual(String(describing: Self.reach(index).state), String(describing: state))
        }
    }

    func testQuestions() {
        let expected: [(idle: Bool, opening: Bool, negotiating: Bool, live: Bool, dial: Int?)] = [
            (true, false, false, false, nil), (false, true, false, false, 1), (false, true, true, false, nil),
            (false, false, false, true, nil), (false, false, false, false, nil), (false, false, false, false, nil),
        ]
        for (index, answers) in expected.enumerated() {
            let lifecycle = Self.reach(index)
            let label = Lifecycle.name(of: lifecycle.state)
            XCTAssertEqual(lifecycle.isIdle, answers.idle, label)
            XCTAssertEqual(lifecycle.isOpening, answers.opening, label)
            XCTAssertEqual(lifecycle.isNegotiating, answers.negotiating, label)
            XCTAssertEqual(lifecycle.isLive, answers.live, label)
            XCTAssertEqual(lifecycle.dial, answers.dial, label)
        }
    }

    /// A STARTTLS round trip: live, a stage added, negotiating, the stage done, live again.
    func testStageOnALivePairReturnsToLive() {
        var lifecycle = Self.reach(3)
        XCTAssertEqual("\(lifecycle.handle(.stageAdded))", "negotiate")
        XCTAssertTrue(lifecycle.isNegotiating)
        XCTAssertEqual("\(lifecycle.handle(.stageAdded))", "queueStage")
        XCTAssertEqual("\(lifecycle.handle(.stagesDone))", "goLive")
        XCTAssertTrue(lifecycle.isLive)
    }

    /// Guides/Architecture.md lists every state-changing move, generated here from the table.
    func testTheGuideListsEveryMove() throws {
        var moves: [String] = []
        for state in Self.states {
            for event in Self.events {
                guard let next = Lifecycle.transition(state, event)?.next else { continue }
                moves.append("\(Lifecycle.name(of: state)) + \(Self.eventName(event)) → \(Lifecycle.name(of: next))")
            }
        }
        let guide = try String(contentsOf: packageRoot.appendingPathComponent("Guides/Architecture.md"), encoding: .utf8)
        let block = try XCTUnwrap(guide.components(separatedBy: "<!-- lifecycle-moves -->\n```text\n").dropFirst().first)
        let listed = block.components(separatedBy: "\n```")[0].split(separator: "\n").map(String.init)
        XCTAssertEqual(listed, moves, "Guides/Architecture.md's lifecycle moves; the code's are:\n" + moves.joined(separator: "\n"))
    }

    static func eventName(_ event: Lifecycle.Event) -> String {
        if case .tcpUp(let stages) = event { return stages ? "tcpUp (stages)" : "tcpUp (no stages)" }
        return String(String(describing: event).prefix { $0 != "(" })
    }
}
