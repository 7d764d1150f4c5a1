// Network.framework's protocol classes: a protocol (`NWProtocolTCP`...), its definition (an identity with
// a name) and its options (a mutable object a parameters' stack holds). Clients depend on the hierarchy
// (`stack.transportProtocol as? NWProtocolTCP.Options`), so it is Apple's. Every options object keeps
// its values in one `Guarded` state, which is what makes them `Sendable` as Apple declares them.

import Foundation

/// The superclass of Network.framework's protocols (`NWProtocolTCP`, `NWProtocolUDP`, `NWProtocolIP`,
/// `NWProtocolTLS`): Network.framework's `NWProtocol`.
// @unchecked Sendable: no stored state.
public class NWProtocol: @unchecked Sendable {
    init() {}
}

/// A protocol's identity: Network.framework's `NWProtocolDefinition` (`Equatable`,
/// `CustomDebugStringConvertible`, `Sendable`). Two definitions are equal when their names are.
// @unchecked Sendable: only `let`s.
public class NWProtocolDefinition: Equatable, CustomDebugStringConvertible, @unchecked Sendable {
    /// The protocol's name: "tcp", "udp", "ip", "tls" (`NWProtocolDefinition.name`).
    public let name: String

    package init(name: String) {
        self.name = name
    }

    /// The name (`NWProtocolDefinition.debugDescription`).
    public var debugDescription: String { name }

    /// Equal names (`NWProtocolDefinition.==`).
    public static func == (lhs: NWProtocolDefinition, rhs: NWProtocolDefinition) -> Bool {
        lhs.name == rhs.name
    }
}

/// The superclass of every protocol's options (`NWProtocolTCP.Options`, `NWProtocolTLS.Options`...):
/// Network.framework's `NWProtocolOptions`.
// @unchecked Sendable: subclasses keep their values in a `Guarded` state.
public class NWProtocolOptions: @unchecked Sendable {
    init() {}

    /// A deep copy, for `NWParameters.copy()`: each subclass returns its own type with its values.
    func copied() -> NWProtocolOptions {
        preconditionFailure("\(type(of: self)) must override copied()")
    }

    /// The options' type and values, for options whose values are plain data: two options with the same
    /// key act alike, so parameters made of them may share one frozen copy (`NWParameters.frozen()`).
    /// Nil (the default) for options holding blocks or identities, which are never shared.
    var sharingKey: OptionsSharingKey? { nil }
}

/// Plain options by type and values (``NWProtocolOptions/sharingKey``): a concrete type, so comparing and
/// hashing them costs no dynamic casts on a connection's way.
enum OptionsSharingKey: Hashable {
    case tcp(NWProtocolTCP.Options.Values)
    case udp(NWProtocolUDP.Options.Values)
    case ip(NWProtocolIP.Options.Values)
}

extension Guarded {
    /// One field of the state, read or written under the lock. (`Guarded`, not the standard library's
    /// `Mutex`, although that would be held inline: Thread Sanitizer cannot see `Mutex`'s lock.)
    subscript<Field>(_ field: WritableKeyPath<State, Field>) -> Field {
        get { withLock { $0[keyPath: field] } }
        nonmutating set { withLock { $0[keyPath: field] = newValue } }
    }
}

/// The superclass of every protocol's per-connection or per-message metadata (`NWProtocolTLS.Metadata`,
/// `NWProtocolTCP.Metadata`...): Network.framework's `NWProtocolMetadata`.
// @unchecked Sendable: subclasses hold only `let`s or `Guarded` state.
public class NWProtocolMetadata: @unchecked Sendable {
    init() {}
}
