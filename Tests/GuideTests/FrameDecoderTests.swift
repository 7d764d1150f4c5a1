import LongLivedChannel
import SocketStreamsTestSupport
import XCTest

/// The long-lived-channel example's framing (Guides/LongLivedChannel.md): frames split at every byte
/// boundary or stuck together come out whole, a length over the limit is refused, and messages round-trip.
final class FrameDecoderTests: SocketStreamsTestCase {
    /// Payloads of several sizes, the empty one included.
    let payloads: [[UInt8]] = [[], [7], Array("hello".utf8), (0..<300).map { UInt8(truncatingIfNeeded: $0 * 7) }, [0, 0, 0, 0]]

    /// Feeds `pieces` in order, taking every frame after each, and returns the frames and what is left buffered.
    func decode(
        _ pieces: [ArraySlice<UInt8>], maxFrameLength: Int = FrameDecoder.defaultMaxFrameLength
    ) throws(FrameError) -> (frames: [[UInt8]], buffered: Int) {
        var decoder = FrameDecoder(maxFrameLength: maxFrameLength)
        var frames: [[UInt8]] = []
        for piece in pieces {
            decoder.append(piece)
            while let frame = try decoder.nextFrame() { frames.append(frame) }
        }
        return (frames, decoder.bufferedByteCount)
    }

    func testEncodeFramePutsTheLengthFirstBigEndian() {
        XCTAssertEqual(encodeFrame([]), [0, 0, 0, 0])
        let payload = [UInt8](repeating: 9, count: 258)
        XCTAssertEqual(Array(encodeFrame(payload).prefix(4)), [0, 0, 1, 2])
        XCTAssertEqual(Array(encodeFrame(payload).dropFirst(4)), payload)
    }

    func testFramesStuckTogetherInOneReadAllComeOut() throws {
        let stream = payloads.flatMap(encodeFrame)
        let result = try decode([stream[...]])
        XCTAssertEqual(result.frames, payloads)
        XCTAssertEqual(result.buffered, 0)
    }

    func testFramesSplitAtEveryByteBoundaryArriveWhole() throws {
        let stream = payloads.flatMap(encodeFrame)
        for split in 0...stream.count {
            let result = try decode([stream[..<split], stream[split...]])
            XCTAssertEqual(result.frames, payloads, "split at \(split)")
            XCTAssertEqual(result.buffered, 0, "split at \(split)")
        }
        // Every pair of boundaries, over the first three frames (a shorter stream, to keep it quick).
        let short = payloads.prefix(3).flatMap(encodeFrame)
        for first in 0...short.count {
            for second in first...short.count {
                let result = try decode([short[..<first], short[first..<second], short[second...]])
                XCTAssertEqual(result.frames, Array(payloads.prefix(3)), "split at \(first) and \(second)")
            }
        }
        // One byte at a time.
        XCTAssertEqual(try decode(stream.indices.map { stream[$0...$0] }).frames, payloads)
    }

    func testAnIncompleteFrameWaitsInTheBuffer() throws {
        var decoder = FrameDecoder()
        decoder.append([0, 0, 0])
        XCTAssertNil(try decoder.nextFrame())
        decoder.append([5, 1, 2])
        XCTAssertNil(try decoder.nextFrame())
        XCTAssertEqual(decoder.bufferedByteCount, 6)
        decoder.append([3, 4, 5, 0])
        XCTAssertEqual(try decoder.nextFrame(), [1, 2, 3, 4, 5])
        XCTAssertNil(try decoder.nextFrame())
        XCTAssertEqual(decoder.bufferedByteCount, 1)
    }

    func testALengthOverTheLimitIsRefusedAsSoonAsItsHeaderIsComplete() throws {
        // Exactly the limit is fine.
        XCTAssertEqual(try decode([encodeFrame([UInt8](repeating: 1, count: 8))[...]], maxFrameLength: 8).frames.count, 1)
        // One more is refused from the header alone, before any payload came; frames before it still come out.
        var decoder = FrameDecoder(maxFrameLength: 8)
        decoder.append(encodeFrame([1, 2]) + [0, 0, 0, 9])
        XCTAssertEqual(try decoder.nextFrame(), [1, 2])
        XCTAssertThrowsError(try decoder.nextFrame()) { XCTAssertEqual($0 as? FrameError, .frameTooLong(length: 9, limit: 8)) }
        // The decoder stays failed: the stream is out of step.
        decoder.append(encodeFrame([3]))
        XCTAssertThrowsError(try decoder.nextFrame()) { XCTAssertEqual($0 as? FrameError, .frameTooLong(length: 9, limit: 8)) }
        // The largest length a header can hold, with the default limit.
        var defaults = FrameDecoder()
        defaults.append([0xFF, 0xFF, 0xFF, 0xFF])
        XCTAssertThrowsError(try defaults.nextFrame()) {
            XCTAssertEqual($0 as? FrameError, .frameTooLong(length: 0xFFFF_FFFF, limit: FrameDecoder.defaultMaxFrameLength))
        }
        XCTAssertEqual(FrameError.frameTooLong(length: 9, limit: 8).description, "a frame of 9 bytes (the limit is 8)")
    }

    /// Random frames cut into random pieces (seeded, so a failing round can be replayed).
    func testRandomFramesInRandomPiecesArriveWhole() throws {
        var random = SplitMix64(seed: 0x00C0_FFEE)
        for round in 0..<300 {
            let frames = (0..<Int.random(in: 1...12, using: &random)).map { _ in
                (0..<Int.random(in: 0...200, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) }
            }
            let stream = frames.flatMap(encodeFrame)
            var pieces: [ArraySlice<UInt8>] = []
            var offset = 0
            while offset < stream.count {
                let length = min(stream.count - offset, Int.random(in: 1...64, using: &random))
                pieces.append(stream[offset..<offset + length])
                offset += length
            }
            let result = try decode(pieces)
            XCTAssertEqual(result.frames, frames, "round \(round)")
            XCTAssertEqual(result.buffered, 0, "round \(round)")
        }
    }

    func testMessagesRoundTripAndMalformedOnesAreRefused() {
        for message in [
            Message(.request, sequence: 1, body: Array("hello".utf8)), Message(.reply, sequence: 0xDEAD_BEEF, body: []),
            Message(.ping, sequence: 0), Message(.pong, sequence: 7),
        ] {
            XCTAssertEqual(Message(payload: message.payload), message)
        }
        XCTAssertEqual(Message(.reply, sequence: 0x0102_0304, body: [9]).payload, [2, 1, 2, 3, 4, 9])
        XCTAssertNil(Message(payload: []))
        XCTAssertNil(Message(payload: [1, 0, 0, 0]))  // too short for a sequence number
        XCTAssertNil(Message(payload: [99, 0, 0, 0, 1]))  // unknown kind
    }
}
