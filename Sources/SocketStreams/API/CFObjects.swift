// CoreFoundation's object names that Darwin code puts in property values and settings dictionaries
// beside the stream calls, as the Foundation objects they bridge to toll-free there.
//
// swift-corelibs' CoreFoundation imports `kCFNull` as a `CFNull`, `kCFBooleanTrue` as a `CFBoolean` and
// `CFDictionary` as classes that are not `NSObject`s and that nothing converts to with `as`: so
// `[NSObject: NSObject]` and `[String: Any]` settings dictionaries refused them, and
// `settings as CFDictionary` did not compile. Declared here, these names shadow CoreFoundation's (a
// module's declarations win over those of a module it imports; the values even for a file that
// writes `import CoreFoundation` too, the types, like `CFReadStream`, only without it): the values
// are `NSNull` and `NSNumber` Booleans, the types the Foundation classes. CoreFoundation's own functions take their own types; those Darwin code calls
// with a `CFString` beside the stream calls are overloaded below for ours, and `coreFoundationString`
// hands any other one CoreFoundation's.

import Foundation

/// `CFBoolean`: the `NSNumber` Boolean (`kCFBooleanTrue`) Darwin bridges it to.
public typealias CFBoolean = NSNumber
/// `CFNull`: `NSNull` (`kCFNull`).
public typealias CFNull = NSNull
/// `CFDictionary`: `NSDictionary`, so `settings as CFDictionary` works as on Darwin, for a
/// `[NSObject: NSObject]`, a `[String: Any]` or any dictionary Foundation bridges.
public typealias CFDictionary = NSDictionary
/// `CFMutableDictionary`: `NSMutableDictionary`.
public typealias CFMutableDictionary = NSMutableDictionary
/// `CFArray`: `NSArray` (`[identity] as CFArray` for `kCFStreamSSLCertificates`).
public typealias CFArray = NSArray
/// `CFData`: `NSData` (`data as CFData`).
public typealias CFData = NSData

/// `kCFBooleanTrue`: an `NSNumber` Boolean, which fits an `[NSObject: NSObject]` or `[String: Any]`
/// dictionary and which every Boolean-valued property takes (a number-valued one refuses it, as
/// CFNetwork refuses a CFBoolean there).
public let kCFBooleanTrue: CFBoolean! = NSNumber(value: true)
/// `kCFBooleanFalse` (see ``kCFBooleanTrue``).
public let kCFBooleanFalse: CFBoolean! = NSNumber(value: false)
/// `kCFNull`: `NSNull()`, as `kCFStreamSSLPeerName`'s "check no name" value and wherever Darwin code
/// puts `kCFNull` in a dictionary.
public let kCFNull: CFNull! = NSNull()

/// `CFBooleanGetValue` for ``kCFBooleanTrue``/``kCFBooleanFalse`` (and any `NSNumber`).
public func CFBooleanGetValue(_ boolean: CFBoolean!) -> Bool { boolean.boolValue }

extension NSString {
    /// This string as CoreFoundation's own `CFString` (the same object, as Foundation passes it to
    /// CoreFoundation: toll-free), for a CoreFoundation function that SocketStreams does not overload
    /// for its `CFString`: `CFStringGetSmallestEncoding(name.coreFoundationString)`.
    public var coreFoundationString: CoreFoundation.CFString {
        unsafeBitCast(self, to: CoreFoundation.CFString.self)
    }
}

// MARK: - CoreFoundation's string functions, for our CFString

/// `CFStringConvertIANACharSetNameToEncoding("utf-8" as CFString)`: the `CFStringEncoding` for an IANA
/// character-set name (`kCFStringEncodingInvalidId` for an unknown one).
public func CFStringConvertIANACharSetNameToEncoding(_ theString: CFString!) -> CFStringEncoding {
    CoreFoundation.CFStringConvertIANACharSetNameToEncoding(theString.coreFoundationString)
}

/// `CFStringGetLength`: the length in UTF-16 code units.
public func CFStringGetLength(_ theString: CFString!) -> CFIndex { theString.length }

/// `CFStringGetCString`: copies the string into `buffer` as a NUL-terminated C string in `encoding`;
/// false, and nothing copied, if it does not fit (NUL included) or cannot be converted.
public func CFStringGetCString(
    _ theString: CFString!, _ buffer: UnsafeMutablePointer<CChar>!, _ bufferSize: CFIndex, _ encoding: CFStringEncoding
) -> Bool {
    let foundationEncoding = String.Encoding(rawValue: UInt(CFStringConvertEncodingToNSStringEncoding(encoding)))
    guard let buffer, let bytes = String(theString).cString(using: foundationEncoding), bytes.count <= bufferSize else {
        return false
    }
    buffer.update(from: bytes, count: bytes.count)
    return true
}

/// `CFStringHasPrefix`.
public func CFStringHasPrefix(_ theString: CFString!, _ prefix: CFString!) -> Bool { theString.hasPrefix(String(prefix)) }

/// `CFStringHasSuffix`.
public func CFStringHasSuffix(_ theString: CFString!, _ suffix: CFString!) -> Bool { theString.hasSuffix(String(suffix)) }

/// `CFStringCompare`: `kCFCompareCaseInsensitive`, `kCFCompareNumerically` and the other flags as
/// CoreFoundation reads them.
public func CFStringCompare(_ theString1: CFString!, _ theString2: CFString!, _ compareOptions: CFStringCompareFlags)
    -> CFComparisonResult
{
    CoreFoundation.CFStringCompare(theString1.coreFoundationString, theString2.coreFoundationString, compareOptions)
}

/// `CFStringGetIntValue`: the leading decimal integer, 0 if none.
public func CFStringGetIntValue(_ str: CFString!) -> Int32 { CoreFoundation.CFStringGetIntValue(str.coreFoundationString) }

/// `CFStringGetDoubleValue`: the leading decimal number, 0 if none.
public func CFStringGetDoubleValue(_ str: CFString!) -> Double { CoreFoundation.CFStringGetDoubleValue(str.coreFoundationString) }
