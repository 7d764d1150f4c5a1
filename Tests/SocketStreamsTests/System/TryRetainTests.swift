import CSocketStreamsShims
import Foundation
@testable import SocketStreams
import XCTest

/// `cssh_try_retain`, on which a connection's unretained references to its streams rest
/// (`Connection.stream(_:)`): a reference to a live object, none to one whose deinit has begun.
final class TryRetainTests: XCTestCase {
    private final class Probe {
        /// What `cssh_try_retain` answered from inside the deinit.
        let answer: UnsafeMutablePointer<Bool>
        init(answer: UnsafeMutablePointer<Bool>) { self.answer = answer }
        deinit { answer.pointee = cssh_try_retain(Unmanaged.passUnretained(self).toOpaque()) }
    }

    func testALiveObjectIsRetained() {
        let answer = UnsafeMutablePointer<Bool>.allocate(capacity: 1)
        defer { answer.deallocate() }
        answer.pointee = true
        weak var watched: Probe?
        var kept: Probe?
        do {
            let probe = Probe(answer: answer)
            watched = probe
            let unmanaged = Unmanaged.passUnretained(probe)
            XCTAssertTrue(cssh_try_retain(unmanaged.toOpaque()))
            kept = unmanaged.takeRetainedValue()  // the reference taken, balanced
        }
        XCTAssertNotNil(watched, "the reference taken keeps the object")
        kept = nil
        XCTAssertNil(watched, "one reference taken, one released: the object is gone")
        XCTAssertFalse(answer.pointee, "its deinit saw no reference taken")
        _ = kept
    }

    /// `UnretainedReference`: names its object and no other; `taken()` of a live object is one
    /// reference, which the caller releases.
    func testAnUnretainedReferenceTakesOneReferenceToItsObject() {
        let answer = UnsafeMutablePointer<Bool>.allocate(capacity: 1)
        defer { answer.deallocate() }
        weak var watched: Probe?
        do {
            let probe = Probe(answer: answer)
            let other = Probe(answer: answer)
            watched = probe
            let reference = UnretainedReference(probe)
            XCTAssertTrue(reference.refers(to: probe))
            XCTAssertFalse(reference.refers(to: other))
            let taken = reference.taken()
            XCTAssertNotNil(taken)
            taken?.release()
        }
        XCTAssertNil(watched, "a reference taken was not released, or one too many was")
    }

    func testAnObjectBeingDeinitialisedIsNotRetained() {
        let answer = UnsafeMutablePointer<Bool>.allocate(capacity: 1)
        defer { answer.deallocate() }
        answer.pointee = true
        _ = Probe(answer: answer)
        XCTAssertFalse(answer.pointee)
    }
}
