import Foundation
import XCTest

@testable import SocketStreamsNetwork

/// `FramerInput` and `FramerDeliveries` as plain values: a length-prefixed stream split at every byte
/// boundary, skips past what has arrived, windows across chunks, and what receives take.
final class FramerInputTests: XCTestCase {
    private final class Tag {}

    /// Frames of a 4-byte big-endian length and a type byte, then the body.
    private func frame(_ body: [UInt8], type: UInt8) -> [UInt8] {
        let length = UInt32(body.count)
        return [UInt8(length >> 24), UInt8((length >> 16) & 0xff), UInt8((length >> 8) & 0xff), UInt8(length & 0xff), type] + body
    }

    func testFramesSplitAtEveryByteBoundaryParseTheSame() {
        let stream = frame(Array("hello".utf8), type: 1) + frame([], type: 2) + frame(Array(repeating: 7, count: 300), type: 3)
        for split in 0...stream.count {
            for second in split...stream.count {
                var input = FramerInput()
                var frames: [(type: UInt8, body: [UInt8])] = []
                for part in [stream[0..<split], stream[split..<second], stream[second...]] {
                    input.append(part)
                    frames += drainWhole(&input)
                }
                XCTAssertEqual(frames.map(\.type), [1, 2, 3], "split at \(split), \(second)")
                XCTAssertEqual(frames.map(\.body), [Array("hello".utf8), [], Array(repeating: 7, count: 300)])
                XCTAssertEqual(input.count, 0)
            }
        }
    }

    /// Parses every whole frame buffered: the header with `parse` (peeked at first through `window`),
    /// the body with `take`, as `deliverInputNoCopy` takes it.
    private func drainWhole(_ input: inout FramerInput) -> [(type: UInt8, body: [UInt8])] {
        var frames: [(type: UInt8, body: [UInt8])] = []
        while let window = input.window(minimum: 5, maximum: 5) {
            let length = window.prefix(4).reduce(0) { $0 << 8 | Int($1) }
            let type = window[4]
            guard input.count >= 5 + length else { break }
            XCTAssertTrue(input.parse(minimum: 5, maximum: 5) { buffer, _ in buffer?.count == 5 ? 5 : 0 })
            frames.append((type, Array(input.take(length))))
        }
        return frames
    }

    func testOneByteReadsGiveTheWindowOnlyOnceTheMinimumIsThere() {
        var input = FramerInput()
        var calls = 0
        for byte in frame([9], type: 4).prefix(4) {
            input.append([byte])
            let parsed = input.parse(minimum: 5, maximum: 5) { buffer, isComplete in
                calls += 1
                XCTAssertNil(buffer, "fewer than the minimum: no buffer")
                XCTAssertFalse(isComplete)
                return 0
            }
            XCTAssertFalse(parsed)
        }
        XCTAssertEqual(calls, 4, "the parse block runs exactly once a call")
        input.append([4])
        XCTAssertTrue(
            input.parse(minimum: 5, maximum: 5) { buffer, _ in
                XCTAssertEqual(buffer.map(Array.init), [0, 0, 0, 1, 4], "joined across the five reads")
                return 5
            })
        XCTAssertEqual(input.count, 0)
    }

    func testAParseThatConsumesPastTheBufferSkipsBytesStillToCome() {
        var input = FramerInput()
        input.append([1, 2, 3])
        XCTAssertTrue(input.parse(minimum: 1, maximum: 10) { _, _ in 6 })
        XCTAssertEqual(input.skipping, 3)
        input.append([4, 5])
        XCTAssertEqual(input.count, 0)
        input.append([6, 7, 8])
        XCTAssertEqual(input.skipping, 0)
        XCTAssertEqual(Array(input.take(10)), [7, 8])
    }

    func testNoBytesAndAZeroMinimumCallsTheParseWithNilAndSucceeds() {
        var input = FramerInput()
        var seen: UnsafeMutableRawBufferPointer?? = .none
        XCTAssertTrue(
            input.parse(minimum: 0, maximum: 10) { buffer, _ in
                seen = buffer
                return 0
            })
        XCTAssertEqual(seen.map { $0 == nil }, true)
    }

    func testTakenBytesShareTheChunkTheyArrivedInAndOutliveTheInput() {
        var input = FramerInput()
        input.append(Array(0..<100))
        let first = input.take(40)
        var taken: [Data] = [first]
        do {
            var other = input
            taken.append(other.take(60))
        }
        input = FramerInput()
        XCTAssertEqual(Array(taken[0]), Array(0..<40))
        XCTAssertEqual(Array(taken[1]), Array(40..<100))
        XCTAssertEqual(taken[0].startIndex, 0, "zero-based, as an application indexes it")
        taken[0].withUnsafeBytes { first in
            taken[1].withUnsafeBytes { second in
                XCTAssertEqual(first.baseAddress! + 40, second.baseAddress!, "no copy: both in the read's chunk")
            }
        }
    }

    func testAWindowShorterThanTheBufferedBytesIsCappedAtTheMaximum() {
        var input = FramerInput()
        input.append([1, 2])
        input.append([3, 4, 5])
        XCTAssertTrue(
            input.parse(minimum: 1, maximum: 3) { buffer, _ in
                XCTAssertEqual(buffer.map(Array.init), [1, 2, 3])
                return 1
            })
        XCTAssertEqual(Array(input.take(4)), [2, 3, 4, 5])
    }

    // MARK: a deliverInputNoCopy waiting for its bytes

    private final class Framer: NWProtocolFramerImplementation {
        static var label: String { "FramerInputTests" }
        init(framer: NWProtocolFramer.Instance) {}
        func start(framer: NWProtocolFramer.Instance) -> NWProtocolFramer.StartResult { .ready }
        func handleInput(framer: NWProtocolFramer.Instance) -> Int { 0 }
        func handleOutput(framer: NWProtocolFramer.Instance, message: NWProtocolFramer.Message, messageLength: Int, isComplete: Bool) {}
        func wakeup(framer: NWProtocolFramer.Instance) {}
        func stop(framer: NWProtocolFramer.Instance) -> Bool { true }
        func cleanup(framer: NWProtocolFramer.Instance) {}
    }

    func testADeliveryWaitingForItsBytesTakesThemAsTheyArriveAtEveryBoundary() {
        let definition = NWProtocolFramer.Definition(implementation: Framer.self)
        let body = Array(0..<UInt8(12))
        for split in 0...body.count {
            var state = FramerDriver.State()
            let message = NWProtocolFramer.Message(definition: definition)
            state.delivering = (body.count, message, true)
            for part in [body[0..<split], body[split...]] {
                state.input.append(part)
                state.moveInput()
            }
            XCTAssertNil(state.delivering, "split at \(split)")
            XCTAssertTrue(state.inputChanged, "handleInput is due again once the delivery is done")
            let received = state.deliveries.take(minimum: .max, maximum: .max)
            XCTAssertEqual(received.map { Array($0.data ?? Data()) }, body)
            XCTAssertEqual(received?.isComplete, true)
            XCTAssertTrue(received?.message === message)
        }
    }

    func testPassThroughInputDeliversEverythingInOneMessageUntilTheEnd() {
        var state = FramerDriver.State()
        state.passThroughInput = true
        state.instance = NWProtocolFramer.Instance(
            definition: NWProtocolFramer.Definition(implementation: Framer.self),
            driver: FramerDriver(options: .init(definition: .init(implementation: Framer.self))))
        for byte in Array("after the header".utf8) {
            state.input.append([byte])
            state.moveInput()
        }
        XCTAssertFalse(state.wantsHandleInput, "handleInput is not called once input passes through")
        let received = state.deliveries.take(minimum: 16, maximum: 100)
        XCTAssertEqual(received.map { String(decoding: $0.data ?? Data(), as: UTF8.self) }, "after the header")
        XCTAssertEqual(received?.isComplete, false, "one message, complete only at the input's end")
    }

    // MARK: output

    func testOutputIsWrittenInSlicesOfTheContentAtEveryBoundary() throws {
        let content = Data((0..<20).map { UInt8($0) })
        for split in 0...content.count {
            var output = FramerOutput(content, isComplete: true)
            let first = try XCTUnwrap(output.take(split))
            XCTAssertNil(output.take(content.count - split + 1), "more than is left: nothing taken")
            let second = try XCTUnwrap(output.take(content.count - split))
            XCTAssertEqual(first + second, content, "split at \(split)")
            XCTAssertEqual(output.remaining, 0)
            XCTAssertEqual(output.take(0), Data())
        }
        let large = Data(repeating: 7, count: 4096)  // not inline: a slice shares its storage
        var output = FramerOutput(large, isComplete: false)
        XCTAssertNil(output.take(-1))
        large.withUnsafeBytes { whole in
            output.take(1000)?.withUnsafeBytes { part in XCTAssertEqual(part.baseAddress, whole.baseAddress, "a slice, not a copy") }
        }
    }

    func testOutputWindowsAndConsumingPastTheEnd() {
        var output = FramerOutput(Data([1, 2, 3, 4]), isComplete: true)
        XCTAssertNil(output.window(minimum: 5, maximum: 10), "fewer than the minimum")
        XCTAssertEqual(output.window(minimum: 1, maximum: 2), [1, 2])
        output.consume(3)
        XCTAssertEqual(output.window(minimum: 0, maximum: 10), [4])
        output.consume(10)
        XCTAssertEqual(output.remaining, 0)
        XCTAssertNil(output.window(minimum: 0, maximum: 10))
    }

    // MARK: deliveries

    func testReceiveMessageTakesWholeMessagesAndMetadataOnlyOnes() {
        var deliveries = FramerDeliveries<Tag>()
        let (a, b, c) = (Tag(), Tag(), Tag())
        deliveries.append(Data([1, 2]), message: a, isComplete: false)
        XCTAssertNil(deliveries.take(minimum: .max, maximum: .max), "not complete yet")
        deliveries.append(Data([3]), message: a, isComplete: true)
        deliveries.append(Data(), message: b, isComplete: true)
        deliveries.append(Data([4]), message: c, isComplete: true)
        let first = deliveries.take(minimum: .max, maximum: .max)
        XCTAssertEqual(first?.data, Data([1, 2, 3]))
        XCTAssertTrue(first?.message === a)
        XCTAssertEqual(first?.isComplete, true)
        let second = deliveries.take(minimum: .max, maximum: .max)
        XCTAssertNil(second?.data, "metadata only: no content")
        XCTAssertTrue(second?.message === b)
        XCTAssertEqual(second?.isComplete, true)
        XCTAssertEqual(deliveries.take(minimum: .max, maximum: .max)?.data, Data([4]))
        XCTAssertNil(deliveries.take(minimum: 1, maximum: 1))
        deliveries.ended = true
        let end = deliveries.take(minimum: 1, maximum: 1)
        XCTAssertNil(end?.message)
        XCTAssertEqual(end?.isComplete, true)
        XCTAssertEqual(deliveries.byteCount, 0)
    }

    func testReceiveTakesPartsOfAMessageWithinItsBounds() {
        var deliveries = FramerDeliveries<Tag>()
        let (a, b) = (Tag(), Tag())
        deliveries.append(Data([1, 2, 3, 4, 5]), message: a, isComplete: true)
        deliveries.append(Data([6]), message: b, isComplete: false)
        var deliveriesAgain = FramerDeliveries<Tag>()
        deliveriesAgain.append(Data([1, 2, 3, 4, 5]), message: a, isComplete: true)
        let part = deliveriesAgain.take(minimum: 1, maximum: 2)
        XCTAssertEqual(part?.data, Data([1, 2]))
        XCTAssertEqual(part?.isComplete, false)
        let rest = deliveriesAgain.take(minimum: 1, maximum: 10)
        XCTAssertEqual(rest?.data, Data([3, 4, 5]))
        XCTAssertEqual(rest?.isComplete, true)
        XCTAssertEqual(rest?.data?.startIndex, 0)
        XCTAssertNil(deliveriesAgain.take(minimum: 1, maximum: 1))
        let whole = deliveries.take(minimum: 6, maximum: 10)
        XCTAssertEqual(whole?.data, Data([1, 2, 3, 4, 5]), "a complete message comes short of the minimum")
        XCTAssertNil(deliveries.take(minimum: 2, maximum: 10), "an incomplete one waits for the minimum")
        XCTAssertEqual(deliveries.take(minimum: 1, maximum: 10)?.data, Data([6]))
    }
}
