//! What a failed connect means to a caller, shared by the v1 client and
//! the session client.

const posix = @import("std").posix;

pub const Failure = error{ ConnectionRefused, ConnectTimedOut, NetworkUnreachable, SystemResources };

pub fn of(err: posix.ConnectError) Failure {
    return switch (err) {
        error.ConnectionRefused, error.ConnectionResetByPeer => error.ConnectionRefused,
        error.ConnectionTimedOut => error.ConnectTimedOut,
        error.NetworkUnreachable, error.AddressNotAvailable, error.AddressFamilyNotSupported => error.NetworkUnreachable,
        else => error.SystemResources,
    };
}
