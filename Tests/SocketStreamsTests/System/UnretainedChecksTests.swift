#if DEBUG
    import Foundation
    @testable import SocketStreams
    import XCTest

    /// The debug-build checks of the package's unretained references (UnretainedChecks.swift), one
    /// scheme at a time: each check's predicate passes what the rule allows and names the rule on a case
    /// deliberately broken. The predicates are called directly, so a broken case never traps the process.
    final class UnretainedChecksTests: XCTestCase {
        private final class Answer {
            var problem: String?
            var asked = false
        }

        private final class Holder {
            var reference: UnretainedReference<Probe>?
        }

        /// An object held unretained, whose deinit clears its holder's reference first (or, `clears`
        /// false, breaks the rule) and then asks the end-of-deinit check.
        private final class Probe {
            let holder: Holder
            let clears: Bool
            let answer: Answer

            init(holder: Holder, clears: Bool, answer: Answer) {
                self.holder = holder
                self.clears = clears
                self.answer = answer
                holder.reference = UnretainedReference(self)
            }

            deinit {
                if clears { holder.reference = nil }
                answer.problem = UnretainedReference.deinitProblem(holder.reference, after: self)
                answer.asked = true
            }
        }

        private final class Plain {}

        private final class Client: StreamOperationsClient {
            func operations(_ operations: StreamOperations, handle event: OperationEvent) {}
            func operations(
                _ operations: StreamOperations, shouldTimeOut direction: OperationDirection, tag: Int, elapsed: Double,
                bytesDone: Int
            ) -> Double { 0 }
        }

        // MARK: 1. UnretainedReference (a connection's streams and receiver)

        func testALoadOfALiveObjectPassesAndOneAfterItWasFreedIsCaught() throws {
            var reference: UnretainedReference<Plain>?
            do {
                let object = Plain()
                reference = UnretainedReference(object)
                let taken = try XCTUnwrap(reference?.taken(), "a live object is taken (and its load checked)")
                taken.release()
                XCTAssertNil(reference?.loadProblem(retained: true))
                XCTAssertNotNil(reference?.loadProblem(retained: false), "a live object the try-retain could not retain")
            }
            // The object is gone and the reference still names it: the rule broken. A try-retain that
            // succeeded now would have reached another object at the freed address.
            let problem = try XCTUnwrap(reference?.loadProblem(retained: true))
            XCTAssertTrue(problem.contains("deinit did not clear its unretained reference first"), problem)
            XCTAssertTrue(problem.contains(UnretainedChecks.referenceRule), problem)
            // What the check cannot tell: a failed try-retain of freed memory looks like one of an object
            // whose deinit waits for the lock.
            XCTAssertNil(reference?.loadProblem(retained: false))
        }

        func testTheEndOfADeinitThatClearedItsReferencePasses() {
            let answer = Answer()
            _ = Probe(holder: Holder(), clears: true, answer: answer)
            XCTAssertTrue(answer.asked)
            XCTAssertNil(answer.problem)
        }

        func testTheEndOfADeinitThatLeftItsReferenceIsCaught() throws {
            let answer = Answer()
            let holder = Holder()
            _ = Probe(holder: holder, clears: false, answer: answer)
            XCTAssertTrue(answer.asked)
            let problem = try XCTUnwrap(answer.problem)
            XCTAssertTrue(problem.contains("Probe's deinit did not clear its unretained reference first"), problem)
            holder.reference = nil  // never loaded: it names freed memory
        }

        /// The connection's own checks: a stream or receiver it still refers to is what a deinit that did
        /// not clear it would leave; cleared (as `close(_:deinitialised:)` and `dropReceiver` do), none.
        func testAConnectionTellsAStreamOrReceiverItStillRefersTo() throws {
            let (input, output) = createStreamPair(host: "127.0.0.1", port: 9)
            let connection = input.connection
            XCTAssertNotNil(connection.unretainedProblem(afterDeinitOf: input, .input))
            XCTAssertNotNil(connection.unretainedProblem(afterDeinitOf: output, .output))
            XCTAssertNil(connection.unretainedProblem(afterDeinitOf: input, .output), "the output half names the output")
            let loaded = connection.lock.withLock { connection.stream(.input) }  // a load, checked
            XCTAssertTrue(loaded === input)

            let engine = StreamOperations(reactor: nil)
            XCTAssertNil(connection.unretainedProblem(afterDeinitOf: engine))
            connection.setReceiver(engine)
            let problem = try XCTUnwrap(connection.unretainedProblem(afterDeinitOf: engine))
            XCTAssertTrue(problem.contains("PairReceiver's deinit did not clear"), problem)
            connection.dropReceiver(engine)
            XCTAssertNil(connection.unretainedProblem(afterDeinitOf: engine))
        }

        // MARK: 2. UnretainedClient (an operations engine's client)

        func testAClientLoadPassesWhileItLivesAndIsCaughtAfterItWasFreed() throws {
            var reference: UnretainedClient?
            var address: UnsafeMutableRawPointer?
            do {
                let client = Client()
                reference = UnretainedClient(client)
                address = Unmanaged.passUnretained(client as AnyObject).toOpaque()
                XCTAssertTrue(reference?.retained() === client, "a live client is retained (and its load checked)")
                XCTAssertNil(reference?.loadProblem(at: try XCTUnwrap(address), retained: true))
                let other = Client()
                let mismatch = try XCTUnwrap(
                    reference?.loadProblem(at: Unmanaged.passUnretained(other as AnyObject).toOpaque(), retained: true))
                XCTAssertTrue(mismatch.contains("no longer names the object it was made for"), mismatch)
            }
            let problem = try XCTUnwrap(reference?.loadProblem(at: try XCTUnwrap(address), retained: true))
            XCTAssertTrue(problem.contains("StreamOperationsClient was loaded after its object was freed"), problem)
            XCTAssertNil(reference?.loadProblem(at: try XCTUnwrap(address), retained: false))
        }

        func testAnEngineTellsAClientItStillRefersTo() throws {
            let engine = StreamOperations(reactor: nil)
            let client = Client()
            XCTAssertNil(engine.unretainedProblem(afterDeinitOf: client))
            engine.setClient(client)
            XCTAssertTrue(engine.state.withLock { _ in engine.takeClient() } === client, "a load under the lock, checked")
            let problem = try XCTUnwrap(engine.unretainedProblem(afterDeinitOf: client))
            XCTAssertTrue(problem.contains("StreamOperationsClient's deinit did not clear"), problem)
            engine.dropClient(client)
            XCTAssertNil(engine.unretainedProblem(afterDeinitOf: client))
        }

        /// What `takeClient` asserts: the engine's lock held by the calling thread.
        func testGuardedTellsWhetherTheCallingThreadHoldsItsLock() {
            let guarded = Guarded(0)
            XCTAssertFalse(guarded.isHeld)
            XCTAssertTrue(guarded.withLock { _ in guarded.isHeld })
            let otherThread = DispatchSemaphore(value: 0)
            let answer = Guarded(true)
            guarded.withLock { _ in
                Thread.detachNewThread {
                    answer.withLock { $0 = guarded.isHeld }
                    otherThread.signal()
                }
                otherThread.wait()
            }
            XCTAssertFalse(answer.withLock { $0 }, "held by another thread is not held")
        }

        // MARK: 3. ActiveTransport (the transport view, owned by HeldTransport)

        func testALayeredViewPassesWhileItsOwnerHoldsTheLayerAndIsCaughtAfter() throws {
            var view: ActiveTransport?
            do {
                let held = HeldTransport(PrefixedTransport(prefix: [], over: SocketTransport(fd: -1)))
                view = held.active
                XCTAssertTrue(view?.isLayered == true)
                XCTAssertNil(view?.lifetimeProblem)
                XCTAssertEqual(view?.fd, -1, "a call through the view (checked)")
            }
            let problem = try XCTUnwrap(view?.lifetimeProblem, "the view outlived its HeldTransport")
            XCTAssertTrue(problem.contains("a transport view was used after its layer was released"), problem)
            XCTAssertTrue(problem.contains(UnretainedChecks.viewRule), problem)
        }

        func testATLSViewPassesWhileItsOwnerHoldsTheLayerAndIsCaughtAfter() throws {
            var view: ActiveTransport?
            do {
                let settings = TLSSettings()
                let tls = try TLSTransport(
                    context: TLSContext.shared(for: settings), over: SocketTransport(fd: -1), settings: settings,
                    hostName: "localhost", sessionKey: nil, peerLabel: "test")
                let held = HeldTransport(tls)
                view = held.active
                XCTAssertTrue(held.tls === tls)
                XCTAssertNil(view?.lifetimeProblem)
                XCTAssertEqual(view?.fd, -1, "a call through the view (checked)")
            }
            let problem = try XCTUnwrap(view?.lifetimeProblem, "the view outlived its HeldTransport")
            XCTAssertTrue(problem.contains("a transport view was used after its layer was released"), problem)
        }

        func testTheBareSocketViewHasNothingToCheckAndAViewNamingAnotherLayerIsCaught() throws {
            XCTAssertNil(ActiveTransport.socket(fd: -1).lifetimeProblem)
            let layer = Plain()
            let other = Plain()
            XCTAssertNil(UnretainedChecks.viewProblem(target: Unmanaged.passUnretained(layer).toOpaque(), shadow: layer))
            let problem = try XCTUnwrap(UnretainedChecks.viewProblem(target: Unmanaged.passUnretained(other).toOpaque(), shadow: layer))
            XCTAssertTrue(problem.contains("no longer names the layer it was made for"), problem)
        }
    }
#endif
