// Debug-build checks of the package's three kinds of reference that do not retain their object:
// `UnretainedReference` (a connection's streams and receiver), `UnretainedClient` (an
// operations engine's client) and the transport view (`ActiveTransport`, owned by `HeldTransport`).
// Each is safe only under a rule its holder keeps; in debug builds each keeps a weak shadow of its
// object beside the unretained one, and its loads and uses are checked against the shadow. None of
// this exists in release builds: every stored shadow and every call below is inside `#if DEBUG`.
//
// A check's logic is a predicate here, answering a description of the broken rule (nil: kept), so
// that a test can put a deliberately broken case to it without trapping; the assertions call them.

#if DEBUG
    enum UnretainedChecks {
        /// The rule an unretained reference rests on (`UnretainedReference`, `UnretainedClient`).
        static let referenceRule =
            "a lock guards the reference, every load is made with it held, and the object's deinit, "
            + "before anything else, clears the reference with it held"

        /// The rule the transport view rests on (`ActiveTransport`).
        static let viewRule =
            "a view is used only with the connection's lock held or by a transfer past its gate, "
            + "while the connection's HeldTransport keeps the layer alive"

        /// A load of an unretained reference (`taken()`, `retained()`), checked after its try-retain:
        /// `retained` is what that answered for `pointer`, `shadow` the reference's weak shadow loaded
        /// after it (safe then: with a reference taken, the shadow's own is not the object's last; with
        /// none, the object's deinit has begun, and a weak load of it retains nothing). The shadow is nil
        /// exactly when the deinit of the object the reference was made for has begun, so the try-retain
        /// must have failed; otherwise it names the same object, and the try-retain must have succeeded.
        /// A try-retain that succeeded with the shadow nil took a reference to another object at the
        /// freed one's address: the reference outlived its object.
        static func loadProblem(of kind: String, at pointer: UnsafeMutableRawPointer, retained: Bool, shadow: AnyObject?) -> String? {
            guard let shadow else {
                if !retained { return nil }  // its deinit has begun (and, under the rule, waits for the lock)
                return "SocketStreams: an unretained reference to a \(kind) was loaded after its object was freed "
                    + "(another object now lives at its address): the object's deinit did not clear its unretained "
                    + "reference first (the rule: \(referenceRule))"
            }
            if Unmanaged.passUnretained(shadow).toOpaque() != pointer {
                return "SocketStreams: an unretained reference to a \(kind) no longer names the object it was made for "
                    + "(the rule: \(referenceRule))"
            }
            if !retained {
                return "SocketStreams: an unretained reference to a live \(kind) could not be retained "
                    + "(the rule: \(referenceRule))"
            }
            return nil
        }

        /// The end of an object's deinit: whether its holder still refers to it (`stillReferred`), which
        /// breaks the rule (the reference would outlive the object's memory).
        static func deinitProblem(of kind: String, stillReferred: Bool) -> String? {
            guard stillReferred else { return nil }
            return "SocketStreams: a \(kind)'s deinit did not clear its unretained reference first: its holder "
                + "still refers to it as the deinit ends (the rule: \(referenceRule))"
        }

        /// A use of the transport view: `shadow` is the view's weak shadow of the layer it calls, `target`
        /// the object it calls unretained (not needed when the shadow is nil). The shadow nil: the layer's
        /// deinit has begun (or it is gone), and the call would reach freed memory.
        static func viewProblem(target: UnsafeMutableRawPointer?, shadow: AnyObject?) -> String? {
            guard let shadow else {
                return "SocketStreams: a transport view was used after its layer was released (the rule: \(viewRule))"
            }
            if Unmanaged.passUnretained(shadow).toOpaque() != target {
                return "SocketStreams: a transport view no longer names the layer it was made for (the rule: \(viewRule))"
            }
            return nil
        }

        /// Fails (in debug builds: traps) with `problem`, if there is one.
        @inline(__always)
        static func check(_ problem: @autoclosure () -> String?, file: StaticString = #file, line: UInt = #line) {
            if let problem = problem() { assertionFailure(problem, file: file, line: line) }
        }
    }
#endif
