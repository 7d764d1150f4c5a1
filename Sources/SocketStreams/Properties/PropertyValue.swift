import Foundation

/// Reads property values in any of the boxings Swift code on Linux produces (NSNumber, CFBoolean, a
/// bridged Swift number or Bool), and refuses values of another type (nil: setProperty returns false).
///
/// Booleans and numbers are kept apart as CFNetwork keeps them apart (it checks a Boolean with
/// `CFGetTypeID(value) == CFBooleanGetTypeID()`, and a CFNumber is not a CFBoolean): a Boolean-valued
/// key takes a Bool only (Swift `true`, `kCFBooleanTrue`, `NSNumber(value: true)`), never 0, 1 or
/// another number, nor a string such as "true"; a number-valued key never takes a Bool. Only
/// SystemConfiguration's flags, which are CFNumbers there, take a number (`flag`).
enum PropertyValue {
    /// A Boolean, for keys CFNetwork documents as CFBoolean.
    static func bool(_ value: AnyObject?) -> Bool? {
        guard let value, isBoolean(value) else { return nil }
        return (value as? NSNumber)?.boolValue
    }

    /// A number that is not a Bool (`true` is not 1 s).
    static func double(_ value: AnyObject?) -> Double? {
        guard let number = value as? NSNumber, !isBoolean(number) else { return nil }
        return number.doubleValue
    }

    /// An integral number that is not a Bool (1080, not 1080.5, `true` or "1080").
    static func integer(_ value: Any) -> Int? {
        guard !isBoolean(value) else { return nil }
        if let number = value as? NSNumber { return Int(exactly: number.doubleValue) }
        return value as? Int
    }

    /// SystemConfiguration's flags (`SOCKSEnable`, `ExcludeSimpleHostnames`): CFNumbers in its proxy
    /// dictionaries, on when not 0, as CFNetwork reads them; a Bool is taken too. Not a string.
    static func flag(_ value: Any) -> Bool? {
        if let flag = bool(value as AnyObject) { return flag }
        return integer(value).map { $0 != 0 }
    }

    /// Whether `value` is a Boolean rather than a number. On Linux every NSNumber casts to Bool (and
    /// a Bool NSNumber to every number type), so a Bool is told by its type or its `objCType`, "c",
    /// which a CFBoolean and a bridged Bool have and no other number does.
    static func isBoolean(_ value: Any) -> Bool {
        if type(of: value) == Bool.self { return true }
        guard let number = value as? NSNumber else { return false }
        return String(cString: number.objCType) == "c"
    }
}
