//! Zig client of Locking-Center, a lock server that grants named keys to
//! one holder at a time, waiters served in order of arrival.
//!
//! Every call opens one TCP connection to the mutex port, sends one request,
//! reads the one-byte answer and closes. A lock is not tied to the
//! connection: it stays held until an unlock or a reset, even after the
//! process exits. Keys and sources are byte slices; any byte, 0x00
//! included, may appear. Keys are 1..127 bytes and sources 0..127, checked
//! before anything is sent. POSIX sockets; standard library only.
//!
//! Every call that does not wait for a key (tryLock, unlock, the resets,
//! and the release of wait) gives up after the read timeout with
//! error.ReadTimedOut, so a server that accepts and never answers cannot
//! hang it. A lock has no read timeout.
//!
//!     var client = try lockingcenter.Client.init(allocator, "localhost:22119", .{ .source = "worker-1" });
//!     try client.lock("orders/batch-7");
//!     defer client.unlock("orders/batch-7") catch {};

const std = @import("std");
const posix = std.posix;
const connect_failure = @import("connect_failure.zig");

/// Bounds of keys and sources, in bytes.
pub const max_key_len = 127;
pub const max_source_len = 127;

/// The longest request on the wire: action, key and source with their lengths.
pub const max_request_len = 1 + 1 + max_key_len + 1 + max_source_len;

/// Connect timeout of a client unless its options say otherwise, in milliseconds.
pub const default_connect_timeout_ms: u32 = 5000;

/// Read timeout of a client unless its options say otherwise, in milliseconds.
pub const default_read_timeout_ms: u32 = 10000;

/// Action bytes of the mutex port.
pub const Action = enum(u8) {
    lock = 1,
    unlock = 2,
    reset_key = 3,
    reset_source = 4,
    try_lock = 5,

    fn name(a: Action) []const u8 {
        return switch (a) {
            .lock => "lock",
            .unlock => "unlock",
            .reset_key => "reset",
            .reset_source => "reset source",
            .try_lock => "trylock",
        };
    }
};

/// Answer bytes of the mutex port.
pub const answer_ok: u8 = '+';
pub const answer_failed: u8 = '-';
pub const answer_busy: u8 = '#';

/// What an answer means when it is not a failure.
pub const Outcome = enum { ok, busy };

/// Every error of the client. All are failures; a busy try-lock is not an
/// error (tryLock returns false).
pub const Error = error{
    /// A key that is empty or longer than max_key_len bytes. Nothing was sent.
    InvalidKey,
    /// A source longer than max_source_len bytes. Nothing was sent.
    InvalidSource,
    /// An address that is not "host:port" or "[ipv6]:port".
    InvalidAddress,
    /// The host name did not resolve.
    UnknownHostName,
    /// Nothing listens at the address.
    ConnectionRefused,
    /// The connect did not complete within the connect timeout.
    ConnectTimedOut,
    /// No route to the server.
    NetworkUnreachable,
    /// Sending or receiving failed, or the server closed before answering.
    ConnectionLost,
    /// The server answered '-': it refused the request, could not store it,
    /// or a reset of the request's source withdrew it.
    Failed,
    /// The server answered a byte the protocol does not define for the request.
    UnexpectedAnswer,
    /// The Canceller fired; the connection is closed and the request withdrawn.
    Cancelled,
    /// The call's timeout passed; the connection is closed and the request withdrawn.
    DeadlinePassed,
    /// No answer came within the read timeout; the connection is closed, and
    /// whether the server applied the request is unknown.
    ReadTimedOut,
    /// The system refused a socket, a pipe or memory.
    SystemResources,
};

/// Encodes one request into buf and returns the used part. key is ignored
/// for .reset_source and source for .unlock and .reset_key.
/// Errors: InvalidKey, InvalidSource.
pub fn encodeRequest(buf: *[max_request_len]u8, action: Action, key: []const u8, source: []const u8) Error![]const u8 {
    const with_key = action != .reset_source;
    const with_source = action == .lock or action == .try_lock or action == .reset_source;
    if (with_key) try checkKey(key);
    if (with_source) try checkSource(source);
    buf[0] = @intFromEnum(action);
    var n: usize = 1;
    if (with_key) n = putString(buf, n, key);
    if (with_source) n = putString(buf, n, source);
    return buf[0..n];
}

/// Interprets the answer byte to a request of action: .ok for '+', .busy for
/// '#' to a try-lock. Errors: Failed for '-', UnexpectedAnswer otherwise.
pub fn decodeAnswer(action: Action, answer: u8) Error!Outcome {
    return switch (answer) {
        answer_ok => .ok,
        answer_busy => if (action == .try_lock) .busy else error.UnexpectedAnswer,
        answer_failed => error.Failed,
        else => error.UnexpectedAnswer,
    };
}

fn checkKey(key: []const u8) Error!void {
    if (key.len == 0 or key.len > max_key_len) return error.InvalidKey;
}

fn checkSource(source: []const u8) Error!void {
    if (source.len > max_source_len) return error.InvalidSource;
}

fn putString(buf: *[max_request_len]u8, at: usize, s: []const u8) usize {
    buf[at] = @intCast(s.len);
    @memcpy(buf[at + 1 ..][0..s.len], s);
    return at + 1 + s.len;
}

/// A cancellation handle for Client.lockWith and Client.waitWith. cancel()
/// may be called from any thread or a signal handler; the waiting call
/// closes its connection, so the server withdraws the request, and returns
/// error.Cancelled. A cancelled handle stays cancelled.
pub const Canceller = struct {
    fds: [2]posix.fd_t,

    /// Errors: SystemResources when no pipe can be made.
    pub fn init() Error!Canceller {
        const fds = posix.pipe2(.{ .CLOEXEC = true, .NONBLOCK = true }) catch return error.SystemResources;
        return .{ .fds = fds };
    }

    /// Closes the handle; no call may use it any more.
    pub fn deinit(self: *Canceller) void {
        posix.close(self.fds[0]);
        posix.close(self.fds[1]);
        self.* = undefined;
    }

    /// Fires the handle. Firing twice is harmless.
    pub fn cancel(self: *const Canceller) void {
        // The byte is never read, so the handle stays fired; a full pipe
        // means it already is.
        _ = posix.write(self.fds[1], "x") catch {};
    }

    /// Reports whether cancel() was called.
    pub fn isCancelled(self: *const Canceller) bool {
        var p = [1]posix.pollfd{.{ .fd = self.fds[0], .events = posix.POLL.IN, .revents = 0 }};
        const n = posix.poll(&p, 0) catch return false;
        return n > 0;
    }
};

/// Options of Client.init.
pub const Options = struct {
    /// Names the owner of the locks for reset by source; empty lets the
    /// server use the client's IP address. At most max_source_len bytes.
    source: []const u8 = "",
    /// Bounds each connect, in milliseconds; 0 leaves it to the system.
    connect_timeout_ms: u32 = default_connect_timeout_ms,
    /// Bounds, in milliseconds from the connect to the answer, every call
    /// that does not wait for a key (error.ReadTimedOut); 0 leaves them
    /// unbounded. A lock never has a read timeout.
    read_timeout_ms: u32 = default_read_timeout_ms,
};

/// How long lockWith and waitWith may wait.
pub const WaitOptions = struct {
    /// Give up when this fires (error.Cancelled).
    cancel: ?*const Canceller = null,
    /// Give up after this many milliseconds (error.DeadlinePassed).
    timeout_ms: ?u32 = null,
};

/// A client of one Locking-Center server. It holds no connection and no
/// memory of its own; calls only read it, so threads may share one.
pub const Client = struct {
    allocator: std.mem.Allocator,
    host_buf: [255]u8 = undefined,
    host_len: usize = 0,
    port: u16,
    source_buf: [max_source_len]u8 = undefined,
    source_len: usize = 0,
    connect_timeout_ms: u32,
    read_timeout_ms: u32,

    /// A client of the server at address, "host:port" or "[ipv6]:port" (an
    /// empty host means this machine). allocator serves host name lookups
    /// during calls; nothing stays allocated between calls.
    /// Errors: InvalidAddress, InvalidSource.
    pub fn init(allocator: std.mem.Allocator, address: []const u8, options: Options) Error!Client {
        try checkSource(options.source);
        const colon = std.mem.lastIndexOfScalar(u8, address, ':') orelse return error.InvalidAddress;
        var host_part = address[0..colon];
        if (host_part.len >= 2 and host_part[0] == '[' and host_part[host_part.len - 1] == ']') {
            host_part = host_part[1 .. host_part.len - 1];
        } else if (std.mem.indexOfAny(u8, host_part, "[]:") != null) {
            return error.InvalidAddress;
        }
        const port_text = address[colon + 1 ..];
        for (port_text) |ch| if (ch < '0' or ch > '9') return error.InvalidAddress;
        const port = std.fmt.parseInt(u16, port_text, 10) catch return error.InvalidAddress;
        if (port == 0) return error.InvalidAddress;
        var c = Client{
            .allocator = allocator,
            .port = port,
            .connect_timeout_ms = options.connect_timeout_ms,
            .read_timeout_ms = options.read_timeout_ms,
        };
        if (host_part.len > c.host_buf.len) return error.InvalidAddress;
        @memcpy(c.host_buf[0..host_part.len], host_part);
        c.host_len = host_part.len;
        @memcpy(c.source_buf[0..options.source.len], options.source);
        c.source_len = options.source.len;
        return c;
    }

    /// The host part of the address.
    pub fn host(self: *const Client) []const u8 {
        return self.host_buf[0..self.host_len];
    }

    /// The source sent with locks.
    pub fn source(self: *const Client) []const u8 {
        return self.source_buf[0..self.source_len];
    }

    /// Blocks until key is granted to this client, however long that takes.
    /// Errors: InvalidKey, Failed (refused, or withdrawn by a reset of the
    /// source), and the network errors.
    pub fn lock(self: *const Client, key: []const u8) Error!void {
        _ = try self.request(.lock, key, self.source(), .{});
    }

    /// lock() that gives up when opts.cancel fires (error.Cancelled) or
    /// after opts.timeout_ms (error.DeadlinePassed). Giving up closes the
    /// connection, so the server withdraws the request.
    pub fn lockWith(self: *const Client, key: []const u8, opts: WaitOptions) Error!void {
        _ = try self.request(.lock, key, self.source(), opts);
    }

    /// Takes key only if it is free now: true when this client now holds
    /// it, false when another holder has it (busy, not an error).
    /// error.ReadTimedOut when no answer came within the read timeout.
    pub fn tryLock(self: *const Client, key: []const u8) Error!bool {
        return try self.request(.try_lock, key, self.source(), .{}) == .ok;
    }

    /// Releases key, whoever holds it; releasing a free key succeeds.
    pub fn unlock(self: *const Client, key: []const u8) Error!void {
        _ = try self.request(.unlock, key, "", .{});
    }

    /// Blocks until key is free and returns holding nothing: it takes the
    /// key and releases it at once.
    pub fn wait(self: *const Client, key: []const u8) Error!void {
        return self.waitWith(key, .{});
    }

    /// wait() bounded as lockWith() is; the release is never cancelled, and
    /// is bounded by the read timeout as unlock() is.
    pub fn waitWith(self: *const Client, key: []const u8, opts: WaitOptions) Error!void {
        try self.lockWith(key, opts);
        try self.unlock(key);
    }

    /// Takes key from its holder; the first waiter gets it.
    pub fn resetByKey(self: *const Client, key: []const u8) Error!void {
        _ = try self.request(.reset_key, key, "", .{});
    }

    /// Releases every key held by src and withdraws every parked request
    /// of src (their lock() returns error.Failed). Errors: InvalidSource
    /// and the network errors.
    pub fn resetBySource(self: *const Client, src: []const u8) Error!void {
        _ = try self.request(.reset_source, "", src, .{});
    }

    fn request(self: *const Client, action: Action, key: []const u8, src: []const u8, opts: WaitOptions) Error!Outcome {
        var buf: [max_request_len]u8 = undefined;
        const req = try encodeRequest(&buf, action, key, src);
        if (opts.cancel) |c| if (c.isCancelled()) return error.Cancelled;
        const deadline = Deadline.after(opts.timeout_ms);
        const cancel_fd: posix.fd_t = if (opts.cancel) |c| c.fds[0] else -1;
        const sock = try self.dial(cancel_fd, deadline);
        defer posix.close(sock);
        // A lock waits for its key as long as it takes: no read timeout.
        const timed = action != .lock and self.read_timeout_ms != 0;
        const limit = if (timed) Deadline.earliest(deadline, Deadline.after(self.read_timeout_ms)) else deadline;
        sendAll(sock, req, cancel_fd, limit) catch |err| return readTimedOut(err, timed, deadline);
        const answer = receive(sock, cancel_fd, limit) catch |err| return readTimedOut(err, timed, deadline);
        return decodeAnswer(action, answer);
    }

    fn dial(self: *const Client, cancel_fd: posix.fd_t, deadline: Deadline) Error!posix.socket_t {
        const name = if (self.host_len == 0) "localhost" else self.host();
        if (std.net.Address.parseIp(name, self.port)) |addr| {
            return self.connectOne(addr, cancel_fd, deadline);
        } else |_| {}
        const list = std.net.getAddressList(self.allocator, name, self.port) catch |err| return switch (err) {
            error.OutOfMemory, error.SystemResources, error.ProcessFdQuotaExceeded, error.SystemFdQuotaExceeded => error.SystemResources,
            else => error.UnknownHostName,
        };
        defer list.deinit();
        var last: Error = error.UnknownHostName;
        for (list.addrs) |addr| {
            return self.connectOne(addr, cancel_fd, deadline) catch |err| switch (err) {
                error.Cancelled, error.DeadlinePassed => return err,
                else => {
                    last = err;
                    continue;
                },
            };
        }
        return last;
    }

    fn connectOne(self: *const Client, addr: std.net.Address, cancel_fd: posix.fd_t, deadline: Deadline) Error!posix.socket_t {
        const sock = posix.socket(addr.any.family, posix.SOCK.STREAM | posix.SOCK.NONBLOCK | posix.SOCK.CLOEXEC, posix.IPPROTO.TCP) catch
            return error.SystemResources;
        errdefer posix.close(sock);
        posix.connect(sock, &addr.any, addr.getOsSockLen()) catch |err| switch (err) {
            error.WouldBlock => {
                const connect_limit = Deadline.after(if (self.connect_timeout_ms == 0) null else self.connect_timeout_ms);
                switch (try waitReady(sock, posix.POLL.OUT, cancel_fd, Deadline.earliest(deadline, connect_limit))) {
                    .ready => {},
                    .cancelled => return error.Cancelled,
                    .expired => return if (deadline.passed()) error.DeadlinePassed else error.ConnectTimedOut,
                }
                posix.getsockoptError(sock) catch |e| return connect_failure.of(e);
            },
            else => return connect_failure.of(err),
        };
        return sock;
    }
};

/// What a send or receive that failed with err returns: a limit that passed
/// is the read timeout, unless it was the call's own deadline.
fn readTimedOut(err: Error, timed: bool, deadline: Deadline) Error {
    return if (err == error.DeadlinePassed and timed and !deadline.passed()) error.ReadTimedOut else err;
}

/// A time limit on the monotonic clock, or none.
const Deadline = struct {
    start: ?std.time.Instant = null,
    limit_ns: u64 = 0,

    /// The limit ms milliseconds from now; none for null.
    fn after(ms: ?u32) Deadline {
        const t = ms orelse return .{};
        const now = std.time.Instant.now() catch return .{};
        return .{ .start = now, .limit_ns = @as(u64, t) * std.time.ns_per_ms };
    }

    /// Nanoseconds left, 0 once passed; null for none.
    fn left(d: Deadline) ?u64 {
        const start = d.start orelse return null;
        const now = std.time.Instant.now() catch return 0;
        const used = now.since(start);
        return if (used >= d.limit_ns) 0 else d.limit_ns - used;
    }

    fn earliest(a: Deadline, b: Deadline) Deadline {
        const x = a.left() orelse return b;
        const y = b.left() orelse return a;
        return if (x <= y) a else b;
    }

    fn passed(d: Deadline) bool {
        return (d.left() orelse return false) == 0;
    }

    /// Milliseconds left, for poll(): -1 for none, 0 once passed.
    fn pollTimeout(d: Deadline) i32 {
        const ns = d.left() orelse return -1;
        const ms = (ns + std.time.ns_per_ms - 1) / std.time.ns_per_ms;
        return @intCast(@min(ms, std.math.maxInt(i32)));
    }
};

const Ready = enum { ready, expired, cancelled };

/// Waits until sock reports events (or an error condition), cancel_fd (-1:
/// none) becomes readable, or the deadline passes. A ready socket wins over
/// a cancel, so an answer that has arrived is never thrown away.
fn waitReady(sock: posix.socket_t, events: i16, cancel_fd: posix.fd_t, deadline: Deadline) Error!Ready {
    while (true) {
        var p = [2]posix.pollfd{
            .{ .fd = sock, .events = events, .revents = 0 },
            .{ .fd = cancel_fd, .events = posix.POLL.IN, .revents = 0 },
        };
        const n = posix.poll(&p, deadline.pollTimeout()) catch return error.SystemResources;
        if (p[0].revents != 0) return .ready;
        if (p[1].revents != 0) return .cancelled;
        if (n == 0 and deadline.passed()) return .expired;
    }
}

fn giveUp(r: Ready) Error {
    return switch (r) {
        .cancelled => error.Cancelled,
        .expired => error.DeadlinePassed,
        .ready => error.ConnectionLost,
    };
}

fn sendAll(sock: posix.socket_t, bytes: []const u8, cancel_fd: posix.fd_t, deadline: Deadline) Error!void {
    var rest = bytes;
    while (rest.len > 0) {
        const n = posix.send(sock, rest, posix.MSG.NOSIGNAL) catch |err| switch (err) {
            error.WouldBlock => {
                const r = try waitReady(sock, posix.POLL.OUT, cancel_fd, deadline);
                if (r != .ready) return giveUp(r);
                continue;
            },
            error.SystemResources => return error.SystemResources,
            else => return error.ConnectionLost,
        };
        rest = rest[n..];
    }
}

/// Reads the answer byte. An answer already there when the call is
/// cancelled is still taken: a grant that arrived is not lost.
fn receive(sock: posix.socket_t, cancel_fd: posix.fd_t, deadline: Deadline) Error!u8 {
    while (true) {
        const r = try waitReady(sock, posix.POLL.IN, cancel_fd, deadline);
        var answer: [1]u8 = undefined;
        const n = posix.recv(sock, &answer, 0) catch |err| switch (err) {
            error.WouldBlock => {
                if (r != .ready) return giveUp(r);
                continue;
            },
            error.SystemResources => return error.SystemResources,
            else => return error.ConnectionLost,
        };
        if (n == 0) return error.ConnectionLost;
        return answer[0];
    }
}

// ---- the session protocol (v2) ---------------------------------------------

const session = @import("session.zig");

/// A session: one connection, kept open, that carries every lock it takes
/// (see session.zig).
pub const Session = session.Session;
pub const Lock = session.Lock;
pub const SessionOptions = session.Options;
pub const AcquireOptions = session.AcquireOptions;
pub const TlsOptions = session.TlsOptions;
pub const Cancel = session.Cancel;
pub const Diagnostics = session.Diagnostics;
pub const LostReason = session.LostReason;
pub const SessionError = session.Error;

/// The session protocol's codec, for tests and tools.
pub const frame = @import("frame.zig");
