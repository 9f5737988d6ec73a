//! The session protocol (v2) of Locking-Center: one connection, kept open,
//! carries every lock of a session (docs/protocol.md, "Mutex port, session
//! protocol (v2)").
//!
//!     const session = try lockingcenter.Session.connect(allocator, "localhost:22119", .{ .name = "worker-1" });
//!     defer session.close();
//!     var lock = try session.acquire("orders/batch-7", .{ .lease_ms = 30_000 });
//!     defer lock.release();
//!
//! A session has two threads of its own: the keeper, which pings the server
//! at its keepalive, counts down leases and the session's TTL, and
//! reconnects and resumes after a drop; and a reader per connection, which
//! routes the server's frames to the requests they answer. Callers write
//! their own frames; many requests are in flight at once. Every Session
//! method may be called from any thread; the allocator must be thread-safe
//! (std.heap.GeneralPurposeAllocator and std.heap.c_allocator are).

const std = @import("std");
const posix = std.posix;
const connect_failure = @import("connect_failure.zig");
const wire = @import("frame.zig");
const Tag = wire.Tag;
const Type = wire.Type;
const Code = wire.Code;
const Allocator = std.mem.Allocator;

const ns_per_ms = std.time.ns_per_ms;

pub const max_key_len = 127;
pub const max_owner_len = 127;
pub const max_name_len = 127;
pub const max_note_len = 1024;
pub const max_credential_len = 1024;

/// Every error of the session client. Busy is not among them: tryAcquire
/// returns null for a key that is held.
pub const Error = error{
    /// The acquire's wait (wait_ms) ran out on the server: REFUSED timeout.
    Timeout,
    /// The caller's Cancel fired; a parked acquire was cancelled on the server.
    Cancelled,
    /// The lock was lost (see Lock.lost for why), or an acquire's answer was
    /// lost with a connection and the resumed session does not hold the key.
    LockLost,
    /// A release or renew named a token the server does not have the
    /// session hold for that key: REFUSED stale_token.
    StaleToken,
    /// A reset withdrew the acquire.
    Reset,
    /// The session expired on the server, or the client heard nothing
    /// within its TTL less a margin.
    SessionExpired,
    /// The session was closed.
    SessionClosed,
    /// No address led the cluster.
    NotLeader,
    Unauthenticated,
    Forbidden,
    RateLimited,
    OverLimit,
    Deadlock,
    LimitMismatch,
    Upgrade,
    /// Another refusal (bad_request, not_durable, unsupported, ...): the
    /// diagnostics carry the code and the server's words.
    Refused,
    /// The server sent bytes the protocol does not allow.
    Protocol,
    InvalidKey,
    InvalidOwner,
    InvalidNote,
    InvalidName,
    InvalidCredential,
    InvalidAddress,
    UnknownHostName,
    ConnectionRefused,
    /// A connect or handshake got no answer within its bound.
    ConnectTimedOut,
    NetworkUnreachable,
    /// The connection dropped, or the server answered nothing within the
    /// read timeout.
    ConnectionLost,
    /// The TLS handshake failed (a certificate that does not verify, a
    /// server that does not speak TLS).
    Tls,
    /// The CA file could not be read.
    CaFile,
    OutOfMemory,
    SystemResources,
};

/// Why a lock ended.
pub const LostReason = enum {
    /// Released by its holder.
    released,
    /// Orphaned: left to the server, no longer tracked.
    orphaned,
    /// A reset took it (LOST reset).
    reset,
    /// Its lease ran out, on the server or by the client's own count.
    lease_expired,
    /// The session expired.
    session_expired,
    /// The session was closed.
    session_closed,
    /// The server ended it otherwise, or no longer holds it (a stale token,
    /// or it was lost while the connection was down).
    lost,

    pub fn text(r: LostReason) []const u8 {
        return switch (r) {
            .released => "released",
            .orphaned => "orphaned",
            .reset => "reset",
            .lease_expired => "lease expired",
            .session_expired => "session expired",
            .session_closed => "session closed",
            .lost => "lost",
        };
    }
};

/// What the server said with a refusal, for the caller that passes it.
pub const Diagnostics = struct {
    /// The protocol's code (docs/protocol.md), 0 when the server gave none.
    code: u8 = 0,
    buf: [1024]u8 = undefined,
    len: usize = 0,

    /// The server's words, or the client's when it had none.
    pub fn message(d: *const Diagnostics) []const u8 {
        return d.buf[0..d.len];
    }

    fn set(d: *Diagnostics, code: u8, msg: []const u8) void {
        d.code = code;
        d.len = @min(msg.len, d.buf.len);
        @memcpy(d.buf[0..d.len], msg[0..d.len]);
    }
};

/// TLS for every connection of a session.
pub const TlsOptions = struct {
    /// PEM file of the CA that signs the server's certificate; null: the
    /// system's bundle.
    ca_file: ?[]const u8 = null,
    /// The name the certificate must carry; null: the host of the address.
    server_name: ?[]const u8 = null,
};

/// Options of Session.connect.
pub const Options = struct {
    /// The session's source (reset by source, lc-cli keys -d); empty: the
    /// server uses the client's IP address.
    name: []const u8 = "",
    /// The TTL asked for; 0: the server's default (10 s).
    ttl_ms: u32 = 0,
    /// The token of a server with authentication on (the credential field).
    token: []const u8 = "",
    tls: ?TlsOptions = null,
    /// Bounds each connect.
    connect_timeout_ms: u32 = 5000,
    /// Bounds the first handshake, and the answers of release and close.
    read_timeout_ms: u32 = 5000,
    /// Gets the server's words when connect fails with a refusal.
    diagnostics: ?*Diagnostics = null,
};

/// Cancels a waiting acquire from another thread: cancel() wakes the
/// acquire that was given the handle, which sends CANCEL (the request leaves
/// the server's queue) and returns error.Cancelled. A fired handle stays
/// fired; init a new one for the next acquire.
pub const Cancel = struct {
    mutex: std.Thread.Mutex = .{},
    fired: bool = false,
    waiter: ?*std.Thread.ResetEvent = null,

    pub fn cancel(c: *Cancel) void {
        c.mutex.lock();
        defer c.mutex.unlock();
        c.fired = true;
        if (c.waiter) |w| w.set();
    }

    pub fn isCancelled(c: *Cancel) bool {
        c.mutex.lock();
        defer c.mutex.unlock();
        return c.fired;
    }

    /// Registers ev; false when already fired.
    fn watch(c: *Cancel, ev: ?*std.Thread.ResetEvent) bool {
        c.mutex.lock();
        defer c.mutex.unlock();
        c.waiter = ev;
        return !c.fired;
    }
};

/// Options of an acquire.
pub const AcquireOptions = struct {
    /// How long the server lets it wait; null: for ever. tryAcquire sends 0.
    wait_ms: ?u32 = null,
    /// The lock's own lease; 0: none (it lives as long as the session).
    lease_ms: u32 = 0,
    /// Lock-delay after a loss by expiry; null: the server's default.
    delay_ms: ?u32 = null,
    shared: bool = false,
    /// A semaphore of this many holders; 0 or 1: one holder.
    limit: u32 = 0,
    /// Higher is served first.
    priority: i32 = 0,
    /// Lets a holder of the key (same session and owner) count up.
    reentrant: bool = false,
    /// Who within the session, for reentrancy and deadlock detection.
    owner: []const u8 = "",
    /// The holder's note, shown wherever the lock is listed. UTF-8.
    note: []const u8 = "",
    /// Gives up the wait when fired (error.Cancelled).
    cancel: ?*Cancel = null,
    /// Gets the server's words with a refusal.
    diagnostics: ?*Diagnostics = null,
};

const Key = struct {
    buf: [max_key_len]u8 = undefined,
    len: u8 = 0,

    fn of(k: []const u8) Key {
        var out = Key{ .len = @intCast(k.len) };
        @memcpy(out.buf[0..k.len], k);
        return out;
    }

    fn slice(k: *const Key) []const u8 {
        return k.buf[0..k.len];
    }
};

/// A lock the session holds: a handle. Keep it in a var: release and
/// orphan end the handle (a second call does nothing), so
/// `defer lock.release();` is safe whatever happened before. Release or
/// orphan every lock before Session.close.
pub const Lock = struct {
    state: ?*LockState,
    tok: u64,

    /// The fencing token.
    pub fn token(l: Lock) u64 {
        return l.tok;
    }

    /// The key.
    pub fn key(l: *const Lock) []const u8 {
        const st = l.state orelse return "";
        return st.key.slice();
    }

    /// Releases the lock, best effort: the answer is awaited (at most the
    /// read timeout) and not reported. Idempotent.
    pub fn release(l: *Lock) void {
        l.releaseChecked() catch {};
    }

    /// Releases the lock and reports the server's answer: error.StaleToken
    /// (the server no longer held it), error.LockLost (it was lost before:
    /// see lost()), error.ConnectionLost (no answer within the read
    /// timeout; it is sent again after a reconnect). Ends the handle
    /// whatever the outcome; a second call returns nothing.
    pub fn releaseChecked(l: *Lock) Error!void {
        const st = l.state orelse return;
        l.state = null;
        return st.session.releaseState(st);
    }

    /// Renews the lease: for lease_ms, or, for null, for the last lease
    /// the lock had. Errors: error.StaleToken, error.LockLost, and the
    /// session's.
    pub fn renew(l: *Lock, lease_ms: ?u32) Error!void {
        const st = l.state orelse return error.LockLost;
        return st.session.renewState(st, lease_ms);
    }

    /// Stops caring about the lock: nothing is released (the server keeps
    /// it until its lease, the session's end or a reset). Ends the handle.
    pub fn orphan(l: *Lock) void {
        const st = l.state orelse return;
        l.state = null;
        st.session.orphanState(st);
    }

    /// Why the lock ended, or null while the session holds it.
    pub fn lost(l: *const Lock) ?LostReason {
        const st = l.state orelse return .released;
        const s = st.session;
        s.mu.lock();
        defer s.mu.unlock();
        return st.reason;
    }

    /// Waits until the lock is lost, at most timeout_ms (null: for ever);
    /// returns why, or null when it is still held.
    pub fn waitLost(l: *const Lock, timeout_ms: ?u64) ?LostReason {
        const st = l.state orelse return .released;
        if (timeout_ms) |t| {
            st.event.timedWait(t * ns_per_ms) catch {};
        } else st.event.wait();
        return l.lost();
    }
};

const LockState = struct {
    session: *Session,
    key: Key,
    token: u64,
    hold: ?*Hold,
    reason: ?LostReason = null,
    event: std.Thread.ResetEvent = .{},
    refs: u8 = 2, // the session's hold and the user's handle
};

/// A lock the server holds for the session, with the handles that count
/// in it (more than one after reentrant acquires).
const Hold = struct {
    key: Key,
    token: u64,
    locks: std.ArrayListUnmanaged(*LockState) = .{},
    /// The client's end of the lease (monotonic ns), less the margin.
    lease_end: ?u64 = null,
};

const Outcome = union(enum) {
    none,
    ok,
    busy,
    granted: *LockState,
    failed: Error,
};

/// One request, from its sending until its answer.
const Request = struct {
    typ: u8,
    id: u64 = 0,
    /// The whole frame, sent again after a resume when the server did not
    /// apply it.
    frame: []u8 = &.{},
    key: Key = .{},
    token: u64 = 0,
    target: u64 = 0,
    reentrant: bool = false,
    sent_at: u64 = 0,
    sent: bool = false,
    resent: bool = false,
    /// Nobody waits for the answer: the session frees the request with it.
    abandoned: bool = false,
    done: bool = false,
    event: std.Thread.ResetEvent = .{},
    outcome: Outcome = .none,
    diag_code: u8 = 0,
    diag: ?[]u8 = null,
};

const HeldItem = struct { key: Key, count: u32, left_ms: ?u32 };

/// What a WELCOME says of the session.
const Welcome = struct {
    session: u64,
    secret: [wire.secret_len]u8,
    ttl_ms: u64,
    keepalive_ms: u64,

    fn of(f: wire.Frame) Welcome {
        var w = Welcome{ .session = f.uint(Tag.session) orelse 0, .secret = [_]u8{0} ** wire.secret_len, .ttl_ms = f.uint(Tag.ttl_ms) orelse 10_000, .keepalive_ms = 0 };
        if (f.get(Tag.secret)) |sec| @memcpy(&w.secret, sec);
        // A keepalive of 0 would ping without pause.
        w.keepalive_ms = @max(f.uint(Tag.keepalive_ms) orelse w.ttl_ms / 3, 100);
        return w;
    }
};

/// What a resume's WELCOME said, kept until the answer to the PING sent
/// right after the RESUME: every frame the server owed the session comes
/// before it.
const Replay = struct {
    applied: u64,
    sent_at: u64,
    sync_id: u64,
    held: std.AutoHashMapUnmanaged(u64, HeldItem) = .{},
    by_req: std.AutoHashMapUnmanaged(u64, u64) = .{},
    parked: std.AutoHashMapUnmanaged(u64, void) = .{},
    fresh: std.AutoHashMapUnmanaged(u64, void) = .{},

    /// Takes the applied id and the lists of the resume's WELCOME w.
    fn parse(rp: *Replay, a: Allocator, w: wire.Frame) !void {
        rp.applied = w.uint(Tag.applied) orelse 0;
        for (w.fields) |fl| {
            if (fl.tag != Tag.held and fl.tag != Tag.parked) continue;
            const item = try wire.Item.parse(fl.value);
            const it = item.frame();
            const req = it.uint(Tag.request) orelse 0;
            if (fl.tag == Tag.parked) {
                try rp.parked.put(a, req, {});
                continue;
            }
            const token = it.uint(Tag.token) orelse 0;
            const k = it.get(Tag.key) orelse "";
            if (k.len == 0 or k.len > max_key_len) return error.Protocol;
            const left: ?u32 = if (it.uint(Tag.left_ms)) |l| @intCast(l) else null;
            try rp.held.put(a, token, .{ .key = Key.of(k), .count = @intCast(@max(it.uint(Tag.count) orelse 1, 1)), .left_ms = left });
            try rp.by_req.put(a, req, token);
        }
    }

    fn deinit(r: *Replay, a: Allocator) void {
        r.held.deinit(a);
        r.by_req.deinit(a);
        r.parked.deinit(a);
        r.fresh.deinit(a);
    }
};

/// One connection of a session.
const Conn = struct {
    session: *Session,
    sock: posix.socket_t,
    tls: ?*std.crypto.tls.Client = null,
    addr: Addr,
    reader: wire.Reader(Source) = undefined,
    thread: ?std.Thread = null,
    dead: bool = false,
    /// It brought nothing for the silence bound.
    silent: bool = false,

    const Source = struct {
        c: *Conn,
        pub fn read(src: Source, buf: []u8) !usize {
            const c = src.c;
            if (c.tls) |t| return t.read(std.net.Stream{ .handle = c.sock }, buf);
            return posix.read(c.sock, buf);
        }
    };

    fn write(c: *Conn, bytes: []const u8) !void {
        if (c.tls) |t| return t.writeAll(std.net.Stream{ .handle = c.sock }, bytes);
        var rest = bytes;
        while (rest.len > 0) {
            const n = try posix.send(c.sock, rest, posix.MSG.NOSIGNAL);
            rest = rest[n..];
        }
    }

    fn destroy(c: *Conn) void {
        const a = c.session.allocator;
        c.reader.deinit();
        if (c.tls) |t| a.destroy(t);
        posix.close(c.sock);
        a.destroy(c);
    }
};

/// An address, "host:port".
const Addr = struct {
    buf: [255]u8 = undefined,
    len: u8 = 0,

    fn of(s: []const u8) Error!Addr {
        const t = std.mem.trim(u8, s, " ");
        if (t.len == 0 or t.len > 255) return error.InvalidAddress;
        _ = try splitHostPort(t);
        var a = Addr{ .len = @intCast(t.len) };
        @memcpy(a.buf[0..t.len], t);
        return a;
    }

    fn slice(a: *const Addr) []const u8 {
        return a.buf[0..a.len];
    }

    fn eql(a: *const Addr, b: *const Addr) bool {
        return std.mem.eql(u8, a.slice(), b.slice());
    }
};

fn splitHostPort(address: []const u8) Error!struct { host: []const u8, port: u16 } {
    const colon = std.mem.lastIndexOfScalar(u8, address, ':') orelse return error.InvalidAddress;
    var host = address[0..colon];
    if (host.len >= 2 and host[0] == '[' and host[host.len - 1] == ']') host = host[1 .. host.len - 1];
    const port = std.fmt.parseInt(u16, address[colon + 1 ..], 10) catch return error.InvalidAddress;
    if (port == 0) return error.InvalidAddress;
    return .{ .host = if (host.len == 0) "localhost" else host, .port = port };
}

fn now() u64 {
    var ts: posix.timespec = undefined;
    posix.clock_gettime(posix.CLOCK.MONOTONIC, &ts) catch return 0;
    return @as(u64, @intCast(ts.sec)) * std.time.ns_per_s + @as(u64, @intCast(ts.nsec));
}

/// What the client takes off a duration the server measures, for the drift
/// between the two clocks: a tenth, at least 50 ms, at most half.
fn margin(d: u64) u64 {
    return @min(@max(d / 10, 50 * ns_per_ms), d / 2);
}

/// How long a connection may bring nothing before it counts as dead, for
/// the server's keepalive k: k plus a tenth of k, at least 250 ms.
fn silence(k: u64) u64 {
    return k + @max(k / 10, 250 * ns_per_ms);
}

/// The delay allowed between the server's measuring of a left_ms and the
/// arrival of its frame here (as the Go client: 100 ms).
const delivery_bound = 100 * ns_per_ms;

/// A session of the session protocol with a Locking-Center server (or the
/// nodes of a cluster). Create it with connect, end it with close.
pub const Session = struct {
    allocator: Allocator,
    mu: std.Thread.Mutex = .{},
    /// Wakes the keeper: something to write, a timer moved, the end.
    wake: std.Thread.Condition = .{},
    /// Held while frames are written, so that they go out in id order.
    wmu: std.Thread.Mutex = .{},

    addrs: []Addr,
    cur: usize = 0,
    leader: ?Addr = null,
    shunned: ?Addr = null,
    shunned_until: u64 = 0,

    name: Key,
    credential: []u8,
    tls: ?TlsConfig,
    connect_timeout_ms: u32,
    read_timeout_ms: u32,

    id: u64 = 0,
    secret: [wire.secret_len]u8 = undefined,
    ttl_ns: u64 = 0,
    keepalive_ns: u64 = 0,

    next_id: u64 = 0,
    conn: ?*Conn = null,
    out: std.ArrayListUnmanaged(u8) = .{},
    spare: std.ArrayListUnmanaged(u8) = .{},
    inflight: std.AutoArrayHashMapUnmanaged(u64, *Request) = .{},
    holds: std.AutoHashMapUnmanaged(u64, *Hold) = .{},
    let_go: std.AutoHashMapUnmanaged(u64, void) = .{},
    replay: ?Replay = null,
    ping_id: ?u64 = null,
    ping_sent_at: u64 = 0,
    last_ack: u64 = 0,

    ended: ?Error = null,
    stop: bool = false,
    keeper: ?std.Thread = null,

    const TlsConfig = struct {
        bundle: std.crypto.Certificate.Bundle,
        server_name: ?[]u8,
    };

    /// Opens a session at address: "host:port", or a comma-separated list
    /// of the nodes of a cluster, tried in turn; a node that answers
    /// GOODBYE not_leader naming the leader sends the session there first.
    /// Errors: the refusal of the last address tried (Unauthenticated,
    /// RateLimited, OverLimit, NotLeader, Refused), a connection error, or
    /// an invalid option.
    pub fn connect(allocator: Allocator, address: []const u8, options: Options) Error!*Session {
        if (options.name.len > max_name_len) return error.InvalidName;
        if (options.token.len > max_credential_len) return error.InvalidCredential;
        var addrs = std.ArrayList(Addr).init(allocator);
        defer addrs.deinit();
        var it = std.mem.tokenizeScalar(u8, address, ',');
        while (it.next()) |part| {
            const a = try Addr.of(part);
            for (addrs.items) |x| {
                if (x.eql(&a)) break;
            } else try addrs.append(a);
        }
        if (addrs.items.len == 0) return error.InvalidAddress;

        const s = try allocator.create(Session);
        errdefer allocator.destroy(s);
        s.* = .{
            .allocator = allocator,
            .addrs = try addrs.toOwnedSlice(),
            .name = Key.of(options.name),
            .credential = try allocator.dupe(u8, options.token),
            .tls = null,
            .connect_timeout_ms = options.connect_timeout_ms,
            .read_timeout_ms = options.read_timeout_ms,
        };
        errdefer allocator.free(s.addrs);
        errdefer allocator.free(s.credential);
        if (options.tls) |t| {
            var bundle = std.crypto.Certificate.Bundle{};
            errdefer bundle.deinit(allocator);
            if (t.ca_file) |path| {
                bundle.addCertsFromFilePath(allocator, std.fs.cwd(), path) catch return error.CaFile;
            } else {
                bundle.rescan(allocator) catch return error.CaFile;
            }
            const sn = if (t.server_name) |n| try allocator.dupe(u8, n) else null;
            s.tls = .{ .bundle = bundle, .server_name = sn };
        }
        errdefer if (s.tls) |*t| {
            t.bundle.deinit(allocator);
            if (t.server_name) |n| allocator.free(n);
        };

        var hello = std.ArrayList(u8).init(allocator);
        defer hello.deinit();
        try hello.appendSlice(wire.preface);
        const enc = try wire.Encoder.begin(&hello, Type.hello, 1);
        try enc.bytes(Tag.name, options.name);
        if (options.ttl_ms > 0) try enc.int(Tag.ttl_ms, u32, options.ttl_ms);
        if (options.token.len > 0) try enc.bytes(Tag.credential, options.token);
        enc.finish();

        // Each address once, in turn, following a node that names the leader.
        var last: Error = error.ConnectionRefused;
        var attempts: usize = 0;
        var hops: usize = 0;
        while (attempts < s.addrs.len) {
            if (s.leader != null and hops >= s.addrs.len) s.leader = null;
            if (s.leader != null) hops += 1 else attempts += 1;
            const target = s.nextTarget();
            var w: Welcome = undefined;
            const conn = s.handshake(target, hello.items, @as(u64, options.connect_timeout_ms) * ns_per_ms, @as(u64, options.read_timeout_ms) * ns_per_ms, options.diagnostics, &w, null) catch |e| {
                last = e;
                if (!retryable(e)) return e;
                continue;
            };
            s.opened(conn, &w);
            return s;
        }
        return last;
    }

    fn retryable(err: Error) bool {
        return switch (err) {
            error.Unauthenticated, error.InvalidAddress, error.CaFile, error.OutOfMemory => false,
            else => true,
        };
    }

    /// Attaches the first connection, its WELCOME read, and starts the
    /// threads.
    fn opened(s: *Session, c: *Conn, w: *const Welcome) void {
        s.mu.lock();
        defer s.mu.unlock();
        s.next_id = 1;
        s.last_ack = now();
        s.attach(c, w);
        s.keeper = std.Thread.spawn(.{}, keep, .{s}) catch null;
    }

    /// The id of the session on the server.
    pub fn sessionId(s: *Session) u64 {
        return s.id;
    }

    /// The TTL the server granted, in milliseconds.
    pub fn ttlMs(s: *Session) u64 {
        return s.ttl_ns / ns_per_ms;
    }

    /// Null while the session lives, then why it ended.
    pub fn failure(s: *Session) ?Error {
        s.mu.lock();
        defer s.mu.unlock();
        return s.ended;
    }

    /// Ends the session: CLOSE releases every lock of the session at once
    /// and withdraws its waiting requests; it waits for the answer at most
    /// the read timeout (the server otherwise ends them with the TTL). Then
    /// it stops the threads and frees the session. Release or orphan every
    /// Lock first.
    pub fn close(s: *Session) void {
        const r: ?*Request = s.submit(.{ .typ = Type.close }, &.{}) catch null;
        if (r) |q| {
            q.event.timedWait(@as(u64, s.read_timeout_ms) * ns_per_ms) catch {};
            s.mu.lock();
            s.finishWait(q);
            s.mu.unlock();
        }
        s.mu.lock();
        s.endSession(error.SessionClosed, .session_closed);
        s.stop = true;
        s.wake.broadcast();
        s.mu.unlock();
        if (s.keeper) |t| t.join();
        s.mu.lock();
        if (s.conn) |c| {
            s.conn = null;
            s.mu.unlock();
            s.dropConn(c);
        } else s.mu.unlock();
        s.freeAll();
    }

    fn freeAll(s: *Session) void {
        const a = s.allocator;
        var hi = s.holds.valueIterator();
        while (hi.next()) |h| {
            h.*.locks.deinit(a);
            a.destroy(h.*);
        }
        s.holds.deinit(a);
        for (s.inflight.values()) |r| s.freeRequest(r);
        s.inflight.deinit(a);
        s.let_go.deinit(a);
        if (s.replay) |*rp| rp.deinit(a);
        s.out.deinit(a);
        s.spare.deinit(a);
        if (s.tls) |*t| {
            t.bundle.deinit(a);
            if (t.server_name) |n| a.free(n);
        }
        a.free(s.credential);
        a.free(s.addrs);
        a.destroy(s);
    }

    // ---- acquire ------------------------------------------------------

    /// Asks for key (1 to 127 bytes) and waits until the session holds it,
    /// through reconnections, or until the server's wait bound (wait_ms:
    /// error.Timeout) or the Cancel (error.Cancelled). With wait_ms 0 a
    /// held key is error.Timeout; tryAcquire gives null instead.
    /// Errors: Timeout, Cancelled, Deadlock, LimitMismatch, Upgrade, Reset,
    /// Forbidden, RateLimited, OverLimit, Refused (with the server's words
    /// in options.diagnostics); LockLost when the answer was lost with a
    /// connection and the resumed session does not hold the key; the
    /// session's end (SessionExpired, SessionClosed, Protocol); and
    /// InvalidKey, InvalidOwner, InvalidNote before anything is sent.
    pub fn acquire(s: *Session, key: []const u8, o: AcquireOptions) Error!Lock {
        return (try s.acquireOrBusy(key, o)) orelse error.Timeout;
    }

    /// Takes key only if it is free now (wait_ms 0): null when it is held
    /// or in its lock-delay (busy, not an error).
    pub fn tryAcquire(s: *Session, key: []const u8, o: AcquireOptions) Error!?Lock {
        var t = o;
        t.wait_ms = 0;
        return s.acquireOrBusy(key, t);
    }

    fn acquireOrBusy(s: *Session, key: []const u8, o: AcquireOptions) Error!?Lock {
        if (key.len == 0 or key.len > max_key_len) return error.InvalidKey;
        if (o.owner.len > max_owner_len) return error.InvalidOwner;
        if (o.note.len > max_note_len or !std.unicode.utf8ValidateSlice(o.note)) return error.InvalidNote;
        if (o.cancel) |c| if (c.isCancelled()) return error.Cancelled;

        var body: [2048]u8 = undefined;
        var fba = std.heap.FixedBufferAllocator.init(&body);
        var fields = std.ArrayList(u8).init(fba.allocator());
        encodeAcquire(&fields, key, o) catch unreachable; // bounded above

        const r = try s.submit(.{ .typ = Type.acquire, .key = Key.of(key), .reentrant = o.reentrant }, fields.items);

        if (o.cancel) |c| {
            if (!c.watch(&r.event)) r.event.set();
        }
        r.event.wait();
        if (o.cancel) |c| _ = c.watch(null);

        s.mu.lock();
        if (!r.done) {
            // Cancelled: CANCEL takes it out of the server's queue; the
            // session frees the request with its answer.
            s.abandon(r);
            s.mu.unlock();
            s.flush();
            return error.Cancelled;
        }
        defer s.mu.unlock();
        if (o.diagnostics) |d| if (r.diag_code != 0) d.set(r.diag_code, r.diag orelse "");
        const outcome = r.outcome;
        s.freeRequest(r);
        return switch (outcome) {
            .granted => |st| Lock{ .state = st, .tok = st.token },
            .busy => null,
            .failed => |e| e,
            .ok, .none => error.Protocol,
        };
    }

    fn encodeAcquire(out: *std.ArrayList(u8), key: []const u8, o: AcquireOptions) !void {
        const e = wire.Encoder{ .out = out, .start = 0 };
        try e.bytes(Tag.key, key);
        if (o.wait_ms) |w| try e.int(Tag.wait_ms, u32, w);
        if (o.lease_ms > 0) try e.int(Tag.lease_ms, u32, o.lease_ms);
        if (o.delay_ms) |d| try e.int(Tag.delay_ms, u32, d);
        if (o.shared) try e.int(Tag.mode, u8, 1);
        if (o.limit > 0) try e.int(Tag.limit, u32, o.limit);
        if (o.priority != 0) try e.int(Tag.priority, u32, @bitCast(o.priority));
        if (o.reentrant) try e.int(Tag.reentrant, u8, 1);
        if (o.owner.len > 0) try e.bytes(Tag.owner, o.owner);
        if (o.note.len > 0) try e.bytes(Tag.note, o.note);
    }

    /// Releases the lock of token on key, whoever in the process holds its
    /// handle. Releasing a token the session released before is no error;
    /// a token the server does not have the session hold is
    /// error.StaleToken.
    pub fn releaseToken(s: *Session, key: []const u8, token: u64, diagnostics: ?*Diagnostics) Error!void {
        if (key.len == 0 or key.len > max_key_len) return error.InvalidKey;
        s.mu.lock();
        var extra: usize = 0;
        if (s.holds.get(token)) |h| {
            if (std.mem.eql(u8, h.key.slice(), key)) {
                // Its handles end as released; one RELEASE for each count.
                extra = h.locks.items.len -| 1;
                s.endHold(h, .released);
                for (0..extra) |_| s.queueReleaseQuiet(key, token, false);
            }
        }
        s.mu.unlock();
        return s.sendRelease(key, token, diagnostics);
    }

    // ---- the handle's operations ----------------------------------------

    fn releaseState(s: *Session, st: *LockState) Error!void {
        s.mu.lock();
        if (st.reason) |why| {
            s.unref(st);
            s.mu.unlock();
            if (why == .released or why == .orphaned) return;
            return error.LockLost;
        }
        const key = st.key;
        const token = st.token;
        s.dropLock(st, .released);
        s.unref(st);
        s.mu.unlock();
        return s.sendRelease(key.slice(), token, null);
    }

    fn sendRelease(s: *Session, key: []const u8, token: u64, diagnostics: ?*Diagnostics) Error!void {
        var body: [160]u8 = undefined;
        const r = s.submit(.{ .typ = Type.release, .key = Key.of(key), .token = token }, releaseFields(&body, key, token, false)) catch |e| {
            return if (e == error.SessionClosed) {} else e;
        };
        return s.awaitBounded(r, diagnostics);
    }

    /// Waits for the answer of r at most the read timeout.
    fn awaitBounded(s: *Session, r: *Request, diagnostics: ?*Diagnostics) Error!void {
        const limit = @as(u64, s.read_timeout_ms) * ns_per_ms;
        if (limit > 0) r.event.timedWait(limit) catch {} else r.event.wait();
        s.mu.lock();
        defer s.mu.unlock();
        if (!r.done) {
            r.abandoned = true; // sent again after a reconnect; freed with its answer
            return error.ConnectionLost;
        }
        if (diagnostics) |d| if (r.diag_code != 0) d.set(r.diag_code, r.diag orelse "");
        const outcome = r.outcome;
        s.freeRequest(r);
        return switch (outcome) {
            .failed => |e| e,
            else => {},
        };
    }

    fn renewState(s: *Session, st: *LockState, lease_ms: ?u32) Error!void {
        if (st.session.lockEnded(st)) return error.LockLost;
        var body: [256]u8 = undefined;
        var fba = std.heap.FixedBufferAllocator.init(&body);
        var fields = std.ArrayList(u8).init(fba.allocator());
        const e = wire.Encoder{ .out = &fields, .start = 0 };
        e.bytes(Tag.key, st.key.slice()) catch unreachable;
        e.int(Tag.token, u64, st.token) catch unreachable;
        if (lease_ms) |l| if (l > 0) e.int(Tag.lease_ms, u32, l) catch unreachable;
        const r = try s.submit(.{ .typ = Type.renew, .key = st.key, .token = st.token }, fields.items);
        return s.awaitBounded(r, null);
    }

    fn orphanState(s: *Session, st: *LockState) void {
        s.mu.lock();
        defer s.mu.unlock();
        if (st.reason == null) {
            s.let_go.put(s.allocator, st.token, {}) catch {};
            s.dropLock(st, .orphaned);
        }
        s.unref(st);
    }

    // ---- requests (called with mu held) -----------------------------------

    fn lockEnded(s: *Session, st: *LockState) bool {
        s.mu.lock();
        defer s.mu.unlock();
        return st.reason != null;
    }

    /// Sends the request r describes, with its encoded fields, and returns
    /// it in flight. mu not held; the session's end is its error.
    fn submit(s: *Session, r: Request, fields: []const u8) Error!*Request {
        s.mu.lock();
        const q = blk: {
            defer s.mu.unlock();
            if (s.ended) |e| return e;
            break :blk try s.submitLocked(r, fields);
        };
        s.flush();
        return q;
    }

    /// submit with mu held; the frame goes out with the next flush.
    fn submitLocked(s: *Session, r: Request, fields: []const u8) Error!*Request {
        const q = try s.allocator.create(Request);
        q.* = r;
        s.encode(q, fields) catch |e| {
            s.allocator.destroy(q);
            return e;
        };
        return q;
    }

    /// Gives r the next id and its frame (fields: the encoded fields), puts
    /// it in flight and queues it for the attached connection.
    fn encode(s: *Session, r: *Request, fields: []const u8) Error!void {
        const f = try s.allocator.alloc(u8, 13 + fields.len);
        s.next_id += 1;
        r.id = s.next_id;
        std.mem.writeInt(u32, f[0..4], @intCast(9 + fields.len), .big);
        f[4] = r.typ;
        std.mem.writeInt(u64, f[5..13], r.id, .big);
        @memcpy(f[13..], fields);
        r.frame = f;
        r.sent_at = now();
        s.inflight.put(s.allocator, r.id, r) catch |e| {
            s.allocator.free(f);
            return e;
        };
        if (s.conn != null) {
            s.out.appendSlice(s.allocator, f) catch {}; // sent after the next resume
            r.sent = true;
        }
    }

    /// The fields of a RELEASE, encoded into body.
    fn releaseFields(body: *[160]u8, key: []const u8, token: u64, lapse: bool) []const u8 {
        var fba = std.heap.FixedBufferAllocator.init(body);
        var fields = std.ArrayList(u8).init(fba.allocator());
        const e = wire.Encoder{ .out = &fields, .start = 0 };
        e.bytes(Tag.key, key) catch unreachable;
        e.int(Tag.token, u64, token) catch unreachable;
        if (lapse) e.int(Tag.lapse, u8, 1) catch unreachable;
        return fields.items;
    }

    /// A release nobody waits for: its answer does not matter. mu held.
    fn queueReleaseQuiet(s: *Session, key: []const u8, token: u64, lapse: bool) void {
        var body: [160]u8 = undefined;
        const r = Request{ .typ = Type.release, .key = Key.of(key), .token = token, .abandoned = true };
        _ = s.submitLocked(r, releaseFields(&body, key, token, lapse)) catch {};
        s.wake.signal();
    }

    /// Gives up a request whose caller has gone: one that never left the
    /// client is forgotten, an acquire on the server is cancelled.
    fn abandon(s: *Session, r: *Request) void {
        r.abandoned = true;
        if (!r.sent) {
            _ = s.inflight.orderedRemove(r.id);
            s.freeRequest(r);
            return;
        }
        if (r.typ != Type.acquire) return;
        var b: [11]u8 = undefined;
        b[0] = Tag.target;
        std.mem.writeInt(u16, b[1..3], 8, .big);
        std.mem.writeInt(u64, b[3..11], r.id, .big);
        _ = s.submitLocked(.{ .typ = Type.cancel, .target = r.id, .abandoned = true }, &b) catch return;
        s.wake.signal();
    }

    /// Settles r with outcome: hands it to its caller, or frees it when
    /// nobody waits.
    fn complete(s: *Session, r: *Request, outcome: Outcome) void {
        if (r.abandoned) {
            s.freeRequest(r);
            return;
        }
        r.outcome = outcome;
        r.done = true;
        r.event.set();
    }

    /// After the caller's wait for r: a request that is not done yet
    /// (no answer within the bound) is left to the session.
    fn finishWait(s: *Session, r: *Request) void {
        if (r.done) s.freeRequest(r) else r.abandoned = true;
    }

    fn freeRequest(s: *Session, r: *Request) void {
        if (r.frame.len > 0) s.allocator.free(r.frame);
        if (r.diag) |d| s.allocator.free(d);
        s.allocator.destroy(r);
    }

    fn refuse(s: *Session, r: *Request, code: u8, msg: []const u8, e: Error) void {
        r.diag_code = code;
        r.diag = s.allocator.dupe(u8, msg) catch null;
        s.complete(r, .{ .failed = e });
    }

    // ---- locks (mu held) --------------------------------------------------

    /// Makes a handle of the hold of token for the acquire r; leased: the
    /// lease ends left_ms after from.
    fn grant(s: *Session, r: *Request, token: u64, left_ms: ?u32, from: u64) void {
        const a = s.allocator;
        if (r.abandoned) {
            // The grant crossed the cancel: nobody takes the lock.
            s.queueReleaseQuiet(r.key.slice(), token, false);
            return s.freeRequest(r);
        }
        const h = s.holds.get(token) orelse blk: {
            const nh = a.create(Hold) catch return s.complete(r, .{ .failed = error.OutOfMemory });
            nh.* = .{ .key = r.key, .token = token };
            s.holds.put(a, token, nh) catch {
                a.destroy(nh);
                return s.complete(r, .{ .failed = error.OutOfMemory });
            };
            break :blk nh;
        };
        const st = a.create(LockState) catch return s.complete(r, .{ .failed = error.OutOfMemory });
        st.* = .{ .session = s, .key = r.key, .token = token, .hold = h };
        h.locks.append(a, st) catch {
            a.destroy(st);
            return s.complete(r, .{ .failed = error.OutOfMemory });
        };
        if (left_ms) |l| s.setLease(h, from, l);
        s.complete(r, .{ .granted = st });
    }

    fn setLease(s: *Session, h: *Hold, from: u64, left_ms: u32) void {
        const left = @as(u64, left_ms) * ns_per_ms;
        h.lease_end = from + left - margin(left);
        s.wake.signal();
    }

    /// Ends one handle of its hold; the hold goes with its last handle.
    fn dropLock(s: *Session, st: *LockState, why: LostReason) void {
        if (st.hold) |h| {
            for (h.locks.items, 0..) |x, i| if (x == st) {
                _ = h.locks.orderedRemove(i);
                break;
            };
            if (h.locks.items.len == 0) s.forgetHold(h);
        }
        s.endLock(st, why);
    }

    fn endLock(s: *Session, st: *LockState, why: LostReason) void {
        if (st.reason != null) return;
        st.reason = why;
        st.hold = null;
        st.event.set();
        s.unref(st);
    }

    fn unref(s: *Session, st: *LockState) void {
        st.refs -= 1;
        if (st.refs == 0) s.allocator.destroy(st);
    }

    /// Ends every handle of h.
    fn endHold(s: *Session, h: *Hold, why: LostReason) void {
        _ = s.holds.remove(h.token);
        for (h.locks.items) |st| s.endLock(st, why);
        h.locks.deinit(s.allocator);
        s.allocator.destroy(h);
    }

    fn forgetHold(s: *Session, h: *Hold) void {
        _ = s.holds.remove(h.token);
        h.locks.deinit(s.allocator);
        s.allocator.destroy(h);
    }

    /// Ends the session: every lock with why, every request with e (a
    /// release after a close succeeds: the close released it).
    fn endSession(s: *Session, e: Error, why: LostReason) void {
        if (s.ended != null) return;
        s.ended = e;
        while (true) {
            var it = s.holds.valueIterator();
            const h = (it.next() orelse break).*;
            s.endHold(h, why);
        }
        while (s.inflight.count() > 0) {
            const r = s.inflight.values()[0];
            _ = s.inflight.orderedRemove(r.id);
            if (r.typ == Type.release and e == error.SessionClosed) s.complete(r, .ok) else s.complete(r, .{ .failed = e });
        }
        if (s.conn) |c| posix.shutdown(c.sock, .both) catch {};
        s.wake.broadcast();
    }

    // ---- writing ---------------------------------------------------------

    /// Writes what is queued, in id order, on the attached connection.
    fn flush(s: *Session) void {
        s.wmu.lock();
        defer s.wmu.unlock();
        s.mu.lock();
        const c = s.conn;
        if (c == null or s.out.items.len == 0) {
            s.mu.unlock();
            return;
        }
        std.mem.swap(std.ArrayListUnmanaged(u8), &s.out, &s.spare);
        s.mu.unlock();
        c.?.write(s.spare.items) catch {
            posix.shutdown(c.?.sock, .both) catch {}; // the reader sees it
        };
        s.spare.clearRetainingCapacity();
    }

    // ---- connections -----------------------------------------------------

    /// The address to try next: the leader a node named, else the next
    /// address in turn, passing over the one that went silent lately.
    fn nextTarget(s: *Session) Addr {
        if (s.leader) |l| {
            s.leader = null;
            if (!s.isShunned(&l)) return l;
        }
        var i: usize = 0;
        while (i < s.addrs.len) : (i += 1) {
            const a = s.addrs[s.cur];
            s.cur = (s.cur + 1) % s.addrs.len;
            if (!s.isShunned(&a)) return a;
        }
        return s.addrs[s.cur];
    }

    fn isShunned(s: *Session, a: *const Addr) bool {
        const sh = s.shunned orelse return false;
        return s.addrs.len > 1 and sh.eql(a) and now() < s.shunned_until;
    }

    /// Makes the next reconnect try a first (the address it last served on).
    fn preferAddr(s: *Session, a: *const Addr) void {
        for (s.addrs, 0..) |x, i| if (x.eql(a)) {
            s.cur = i;
            return;
        };
    }

    /// Dials target within connect_bound, writes first (the preface and
    /// the first frames), and reads the answer within answer_bound from
    /// then (the TLS handshake included). Returns the connection with its
    /// WELCOME ready to be read again (reader.answer), or the refusal.
    fn handshake(s: *Session, target: Addr, first: []const u8, connect_bound: u64, answer_bound: u64, diagnostics: ?*Diagnostics, w: *Welcome, replay: ?*Replay) Error!*Conn {
        const sock = try dialTcp(s.allocator, target.slice(), connect_bound);
        const c = s.allocator.create(Conn) catch {
            posix.close(sock);
            return error.OutOfMemory;
        };
        c.* = .{ .session = s, .sock = sock, .addr = target };
        c.reader = wire.Reader(Conn.Source).init(s.allocator, .{ .c = c });
        errdefer c.destroy();
        setTimeout(sock, posix.SO.RCVTIMEO, @max(answer_bound, ns_per_ms));
        setTimeout(sock, posix.SO.SNDTIMEO, @max(answer_bound, ns_per_ms));
        if (s.tls) |t| {
            const tc = try s.allocator.create(std.crypto.tls.Client);
            const host = t.server_name orelse (splitHostPort(target.slice()) catch unreachable).host;
            tc.* = std.crypto.tls.Client.init(std.net.Stream{ .handle = sock }, .{
                .host = .{ .explicit = host },
                .ca = .{ .bundle = t.bundle },
            }) catch |e| {
                s.allocator.destroy(tc);
                return if (e == error.WouldBlock) error.ConnectTimedOut else error.Tls;
            };
            c.tls = tc;
        }
        c.write(first) catch |e| return if (e == error.WouldBlock) error.ConnectTimedOut else error.ConnectionLost;
        const f = c.reader.answer() catch |e| {
            if (std.mem.eql(u8, c.reader.pending(), "-")) return error.Refused; // a port without sessions
            return switch (e) {
                error.WouldBlock => error.ConnectTimedOut,
                error.Protocol => error.Protocol,
                else => error.ConnectionLost,
            };
        };
        switch (f.typ) {
            Type.welcome => {
                w.* = Welcome.of(f);
                if (replay) |rp| try rp.parse(s.allocator, f);
                return c;
            },
            Type.goodbye => {
                const code: u8 = @intCast(f.uint(Tag.code) orelse 0);
                if (diagnostics) |d| d.set(code, f.get(Tag.message) orelse "");
                if (code == Code.not_leader) {
                    if (f.get(Tag.leader)) |l| {
                        if (Addr.of(l)) |a| {
                            s.leader = a;
                        } else |_| {}
                    }
                }
                return goodbyeError(code);
            },
            Type.refused => {
                const code: u8 = @intCast(f.uint(Tag.code) orelse 0);
                if (diagnostics) |d| d.set(code, f.get(Tag.message) orelse "");
                return error.Refused;
            },
            else => return error.Protocol,
        }
    }

    fn goodbyeError(code: u8) Error {
        return switch (code) {
            Code.session_expired, Code.unknown_session => error.SessionExpired,
            Code.protocol_error => error.Protocol,
            Code.unauthenticated => error.Unauthenticated,
            Code.rate_limited => error.RateLimited,
            Code.over_limit => error.OverLimit,
            Code.not_leader => error.NotLeader,
            Code.session_ended => error.ConnectionLost,
            Code.shutting_down => error.ConnectionLost,
            else => error.Refused,
        };
    }

    /// Attaches c, whose WELCOME said w, and starts its reader thread. mu
    /// held.
    fn attach(s: *Session, c: *Conn, w: *const Welcome) void {
        s.id = w.session;
        s.secret = w.secret;
        s.ttl_ns = w.ttl_ms * ns_per_ms;
        s.keepalive_ns = w.keepalive_ms * ns_per_ms;
        setTimeout(c.sock, posix.SO.RCVTIMEO, silence(s.keepalive_ns));
        setTimeout(c.sock, posix.SO.SNDTIMEO, silence(s.keepalive_ns));
        s.conn = c;
        s.preferAddr(&c.addr);
        c.thread = std.Thread.spawn(.{}, readLoop, .{ s, c }) catch blk: {
            c.dead = true;
            break :blk null;
        };
    }

    /// Shuts c down, joins its reader and frees it. mu not held; c is no
    /// longer attached.
    fn dropConn(s: *Session, c: *Conn) void {
        posix.shutdown(c.sock, .both) catch {};
        if (c.thread) |t| t.join();
        s.wmu.lock(); // no writer uses c any more
        s.wmu.unlock();
        c.destroy();
    }

    /// The reader of c: routes every frame until the connection ends.
    fn readLoop(s: *Session, c: *Conn) void {
        reading: while (true) {
            var f = c.reader.answer() catch |e| {
                if (e == error.WouldBlock) c.silent = true;
                break;
            };
            s.mu.lock();
            // The frames already read are handled under one hold of the lock.
            while (s.conn == c and s.handle(f)) {
                if (!c.reader.hasFrame()) {
                    s.mu.unlock();
                    continue :reading;
                }
                f = c.reader.answer() catch break;
            }
            s.mu.unlock();
            break;
        }
        s.mu.lock();
        c.dead = true;
        s.wake.broadcast();
        s.mu.unlock();
    }

    /// The keeper: writes what the reader queued, pings, counts down the
    /// leases and the session's TTL, and reconnects after a drop, until
    /// close.
    fn keep(s: *Session) void {
        s.mu.lock();
        defer s.mu.unlock();
        var backoff_n: u32 = 0;
        while (!s.stop) {
            if (s.ended != null) {
                if (s.conn) |c| {
                    s.conn = null;
                    s.mu.unlock();
                    s.dropConn(c);
                    s.mu.lock();
                    continue;
                }
                s.wake.wait(&s.mu);
                continue;
            }
            const t = now();
            s.expireLeases(t);
            if (t >= s.last_ack + s.ttl_ns - margin(s.ttl_ns)) {
                s.endSession(error.SessionExpired, .session_expired);
                continue;
            }
            if (s.conn) |c| {
                if (c.dead) {
                    s.conn = null;
                    s.detached();
                    if (c.silent) s.shun(&c.addr, silence(s.keepalive_ns));
                    s.mu.unlock();
                    s.dropConn(c);
                    s.mu.lock();
                    continue;
                }
                backoff_n = 0;
                if (s.ping_id == null and t >= s.last_ack + s.keepalive_ns) s.queuePing(t);
                if (s.out.items.len > 0) {
                    s.mu.unlock();
                    s.flush();
                    s.mu.lock();
                    continue;
                }
                var next = s.last_ack + s.keepalive_ns;
                if (s.ping_id != null) next = s.last_ack + s.ttl_ns - margin(s.ttl_ns);
                next = @min(next, s.nextLeaseEnd());
                if (next > t) s.wake.timedWait(&s.mu, next - t) catch {};
                continue;
            }
            // No connection: resume, at once and then with a growing backoff.
            if (backoff_n > 0) {
                const d = s.backoff(backoff_n);
                s.wake.timedWait(&s.mu, d) catch {};
                if (s.stop or s.ended != null) continue;
            }
            backoff_n += 1;
            s.mu.unlock();
            s.reconnect();
            s.mu.lock();
        }
    }

    fn backoff(s: *Session, n: u32) u64 {
        const base: u64 = 50 * ns_per_ms;
        const cap = @min(@max(s.keepalive_ns / 4, base), 500 * ns_per_ms);
        const d = @min(base << @intCast(@min(n - 1, 10)), cap);
        return d / 2 + std.crypto.random.uintLessThan(u64, d / 2 + 1);
    }

    /// What a drop leaves: the queued bytes go (the requests are sent again
    /// after the resume), and an unanswered ping is forgotten. mu held.
    fn detached(s: *Session) void {
        s.out.clearRetainingCapacity();
        s.ping_id = null;
        if (s.replay) |*rp| rp.deinit(s.allocator);
        s.replay = null;
        for (s.inflight.values()) |r| r.sent = false;
    }

    fn queuePing(s: *Session, t: u64) void {
        var b: [13]u8 = undefined;
        std.mem.writeInt(u32, b[0..4], wire.head, .big);
        b[4] = Type.ping;
        std.mem.writeInt(u64, b[5..13], s.next_id + 1, .big);
        s.out.appendSlice(s.allocator, &b) catch return;
        s.next_id += 1;
        s.ping_id = s.next_id;
        s.ping_sent_at = t;
    }

    fn nextLeaseEnd(s: *Session) u64 {
        var next: u64 = std.math.maxInt(u64);
        var it = s.holds.valueIterator();
        while (it.next()) |h| if (h.*.lease_end) |e| {
            next = @min(next, e);
        };
        return next;
    }

    /// Gives up every lock whose lease ended by the client's count, and
    /// releases it on the server with lapse, so that the key keeps its
    /// lock-delay. The RELEASE goes before anything the session sends
    /// later. mu held.
    fn expireLeases(s: *Session, t: u64) void {
        while (true) {
            var due: ?*Hold = null;
            var it = s.holds.valueIterator();
            while (it.next()) |h| if (h.*.lease_end) |e| if (e <= t) {
                due = h.*;
                break;
            };
            const h = due orelse return;
            const key = h.key;
            const token = h.token;
            s.endHold(h, .lease_expired);
            s.queueReleaseQuiet(key.slice(), token, true);
        }
    }

    /// Resumes the session on a new connection: RESUME and a PING in one
    /// write; the PING's answer comes after everything the server owed the
    /// session. mu not held.
    fn reconnect(s: *Session) void {
        s.mu.lock();
        const target = s.nextTarget();
        s.next_id += 2;
        const rid = s.next_id - 1;
        const sync_id = s.next_id;
        var b = std.ArrayList(u8).init(s.allocator);
        defer b.deinit();
        (blk: {
            b.appendSlice(wire.preface) catch |e| break :blk e;
            const e = wire.Encoder.begin(&b, Type.@"resume", rid) catch |e| break :blk e;
            e.int(Tag.session, u64, s.id) catch |x| break :blk x;
            e.bytes(Tag.secret, &s.secret) catch |x| break :blk x;
            if (s.credential.len > 0) e.bytes(Tag.credential, s.credential) catch |x| break :blk x;
            e.finish();
            const p = wire.Encoder.begin(&b, Type.ping, sync_id) catch |x| break :blk x;
            p.finish();
        }) catch {
            s.mu.unlock();
            return;
        };
        const bound = silence(s.keepalive_ns);
        s.mu.unlock();
        const sent_at = now();
        var w: Welcome = undefined;
        var rp = Replay{ .applied = 0, .sent_at = sent_at, .sync_id = sync_id };
        const c = s.handshake(target, b.items, @min(bound, @as(u64, s.connect_timeout_ms) * ns_per_ms), bound, null, &w, &rp) catch |e| {
            rp.deinit(s.allocator);
            s.mu.lock();
            defer s.mu.unlock();
            switch (e) {
                error.SessionExpired, error.Unauthenticated, error.Protocol => s.endSession(e, .session_expired),
                error.NotLeader => {},
                error.ConnectTimedOut => s.shun(&target, bound),
                else => {},
            }
            return;
        };
        s.mu.lock();
        defer s.mu.unlock();
        if (s.ended != null or s.stop) {
            s.mu.unlock();
            c.destroy();
            s.mu.lock();
            return;
        }
        if (w.session != s.id) {
            rp.deinit(s.allocator);
            s.mu.unlock();
            c.destroy();
            s.mu.lock();
            return;
        }
        s.ack(sent_at);
        // Send again, in order, what the server never applied.
        var i: usize = 0;
        while (i < s.inflight.count()) {
            const r = s.inflight.values()[i];
            if (r.id <= rp.applied) {
                i += 1;
                continue;
            }
            if ((r.typ == Type.acquire and r.abandoned) or
                (r.typ == Type.cancel and s.inflight.get(r.target) == null))
            {
                _ = s.inflight.orderedRemove(r.id);
                s.freeRequest(r);
                continue;
            }
            r.resent = true;
            r.sent = true;
            s.out.appendSlice(s.allocator, r.frame) catch {};
            i += 1;
        }
        s.replay = rp;
        s.attach(c, &w);
    }

    fn shun(s: *Session, a: *const Addr, bound: u64) void {
        s.shunned = a.*;
        s.shunned_until = now() + bound;
    }

    /// Notes that the server answered a request sent at sent_at: the
    /// session lives until sent_at + TTL at least.
    fn ack(s: *Session, sent_at: u64) void {
        if (sent_at > s.last_ack) s.last_ack = sent_at;
    }

    // ---- frames from the server (mu held) ----------------------------------

    /// Applies one frame and reports whether to go on reading.
    fn handle(s: *Session, f: wire.Frame) bool {
        switch (f.typ) {
            Type.granted, Type.ok, Type.refused, Type.info => {
                if (s.ping_id) |p| if (f.id == p) {
                    s.ack(s.ping_sent_at);
                    s.ping_id = null;
                    return true;
                };
                if (s.replay) |rp| if (f.id == rp.sync_id) {
                    s.reconcile();
                    return true;
                };
                const r = s.inflight.get(f.id) orelse return true;
                const code: u8 = @intCast(f.uint(Tag.code) orelse 0);
                if (f.typ == Type.refused and code == Code.duplicate and r.resent) return true;
                s.ack(r.sent_at);
                _ = s.inflight.orderedRemove(r.id);
                s.answer(r, f, code);
            },
            Type.lost => {
                const token = f.uint(Tag.token) orelse 0;
                const code: u8 = @intCast(f.uint(Tag.code) orelse 0);
                _ = s.let_go.remove(token);
                if (s.holds.get(token)) |h| {
                    s.endHold(h, lostReason(code));
                } else if (s.inflight.get(f.id)) |r| {
                    // A grant whose GRANTED went with a dropped connection.
                    if (r.typ == Type.acquire and s.replay != null and r.id <= s.replay.?.applied) {
                        _ = s.inflight.orderedRemove(r.id);
                        s.refuse(r, code, "granted, then lost while the connection was down", error.LockLost);
                    }
                }
            },
            Type.goodbye => {
                const code: u8 = @intCast(f.uint(Tag.code) orelse 0);
                switch (code) {
                    Code.session_expired, Code.unknown_session => s.endSession(error.SessionExpired, .session_expired),
                    Code.protocol_error => s.endSession(error.Protocol, .lost),
                    Code.not_leader => if (f.get(Tag.leader)) |l| {
                        if (Addr.of(l)) |a| {
                            s.leader = a;
                        } else |_| {}
                    },
                    else => {},
                }
                return false;
            },
            else => {}, // EVENT, and frames this client does not ask for
        }
        return true;
    }

    fn lostReason(code: u8) LostReason {
        return switch (code) {
            Code.reset => .reset,
            Code.lease_expired => .lease_expired,
            Code.session_expired => .session_expired,
            Code.session_ended => .session_closed,
            else => .lost,
        };
    }

    fn refusalError(code: u8) Error {
        return switch (code) {
            Code.timeout => error.Timeout,
            Code.cancelled => error.Cancelled,
            Code.reset => error.Reset,
            Code.stale_token => error.StaleToken,
            Code.session_ended => error.SessionClosed,
            Code.session_expired => error.SessionExpired,
            Code.deadlock => error.Deadlock,
            Code.limit_mismatch => error.LimitMismatch,
            Code.upgrade => error.Upgrade,
            Code.unauthenticated => error.Unauthenticated,
            Code.forbidden => error.Forbidden,
            Code.rate_limited => error.RateLimited,
            Code.over_limit => error.OverLimit,
            else => error.Refused,
        };
    }

    /// Applies the answer f (with its code) to r, which has left inflight.
    fn answer(s: *Session, r: *Request, f: wire.Frame, code: u8) void {
        const msg = f.get(Tag.message) orelse "";
        switch (r.typ) {
            Type.acquire => {
                if (f.typ == Type.granted) return s.granted(r, f);
                if (f.typ != Type.refused) return s.complete(r, .{ .failed = error.Protocol });
                if (code == Code.busy) {
                    r.diag_code = code;
                    return s.complete(r, .busy);
                }
                s.refuse(r, code, msg, refusalError(code));
            },
            Type.release, Type.renew => {
                if (f.typ == Type.refused) {
                    if (code == Code.stale_token) {
                        if (s.holds.get(r.token)) |h| s.endHold(h, .lost);
                    }
                    return s.refuse(r, code, msg, refusalError(code));
                }
                if (r.typ == Type.renew) {
                    if (f.uint(Tag.left_ms)) |l| if (s.holds.get(r.token)) |h| {
                        s.setLease(h, s.measuredAt(r.sent_at), @intCast(l));
                    };
                }
                s.complete(r, .ok);
            },
            Type.close => {
                s.complete(r, if (f.typ == Type.refused) .{ .failed = refusalError(code) } else .ok);
                if (f.typ != Type.refused) s.endSession(error.SessionClosed, .session_closed);
            },
            else => s.complete(r, .ok),
        }
    }

    /// The earliest moment the server can have measured a left_ms that
    /// arrives now in the answer to a request sent at sent_at.
    fn measuredAt(s: *Session, sent_at: u64) u64 {
        _ = s;
        const t = now() -| delivery_bound;
        return @max(t, sent_at);
    }

    fn granted(s: *Session, r: *Request, f: wire.Frame) void {
        const token = f.uint(Tag.token) orelse return s.complete(r, .{ .failed = error.Protocol });
        var left: ?u32 = if (f.uint(Tag.left_ms)) |l| @intCast(l) else null;
        var from = s.measuredAt(r.sent_at);
        if (s.replay) |*rp| {
            if (r.id > rp.applied or rp.parked.contains(r.id)) {
                rp.fresh.put(s.allocator, token, {}) catch {};
            } else {
                // A grant from before the resume.
                const hi = rp.held.get(token) orelse
                    return s.refuse(r, 0, "granted, then lost while the connection was down", error.LockLost);
                from = rp.sent_at;
                left = hi.left_ms;
            }
        }
        s.grant(r, token, left, from);
    }

    /// Settles the session after a resume, once every frame the server owed
    /// it has arrived, against what the WELCOME listed: a lock not listed
    /// was lost while away; an acquire the server applied whose answer
    /// never came is granted if listed, else failed; a listed lock nobody
    /// here holds is released, unless it was left to the server.
    fn reconcile(s: *Session) void {
        var rp = s.replay.?;
        s.replay = null;
        const a = s.allocator;
        defer rp.deinit(a);
        // Locks here that the server no longer lists.
        var gone = std.ArrayList(*Hold).init(a);
        defer gone.deinit();
        var hi = s.holds.valueIterator();
        while (hi.next()) |hp| {
            const h = hp.*;
            if (rp.held.get(h.token)) |item| {
                if (item.left_ms) |l| s.setLease(h, rp.sent_at, l);
            } else if (!rp.fresh.contains(h.token)) gone.append(h) catch {};
        }
        for (gone.items) |h| s.endHold(h, .lost);

        // What the server holds beyond the handles here and the releases in
        // flight: grants whose GRANTED went with the connection.
        var extra = std.AutoHashMap(u64, i64).init(a);
        defer extra.deinit();
        var it = rp.held.iterator();
        while (it.next()) |e| {
            var n: i64 = e.value_ptr.count;
            if (s.holds.get(e.key_ptr.*)) |h| n -= @intCast(h.locks.items.len);
            extra.put(e.key_ptr.*, n) catch {};
        }
        for (s.inflight.values()) |r| if (r.typ == Type.release) {
            if (extra.getPtr(r.token)) |n| n.* -= 1;
        };

        var unanswered = std.ArrayList(*Request).init(a);
        defer unanswered.deinit();
        var i: usize = 0;
        while (i < s.inflight.count()) {
            const r = s.inflight.values()[i];
            if (r.id > rp.applied or (r.typ == Type.acquire and rp.parked.contains(r.id))) {
                i += 1;
                continue;
            }
            _ = s.inflight.orderedRemove(r.id);
            if (r.typ == Type.acquire and !r.abandoned) {
                if (rp.by_req.get(r.id)) |token| {
                    const item = rp.held.get(token).?;
                    if (extra.getPtr(token)) |n| n.* -= 1;
                    s.grant(r, token, item.left_ms, rp.sent_at);
                    continue;
                }
            }
            unanswered.append(r) catch s.complete(r, .{ .failed = error.LockLost });
        }
        for (unanswered.items) |r| switch (r.typ) {
            Type.acquire => {
                if (!r.abandoned and r.reentrant) {
                    var found: ?u64 = null;
                    var hit = rp.held.iterator();
                    while (hit.next()) |e| {
                        const n = extra.get(e.key_ptr.*) orelse 0;
                        if (n > 0 and std.mem.eql(u8, e.value_ptr.key.slice(), r.key.slice())) found = e.key_ptr.*;
                    }
                    if (found) |token| {
                        extra.getPtr(token).?.* -= 1;
                        s.grant(r, token, rp.held.get(token).?.left_ms, rp.sent_at);
                        continue;
                    }
                }
                s.refuse(r, 0, "the answer was lost with the connection, and the session does not hold the key", error.LockLost);
            },
            Type.renew => s.complete(r, if (rp.held.contains(r.token)) .ok else .{ .failed = error.LockLost }),
            else => s.complete(r, .ok),
        };
        var eit = extra.iterator();
        while (eit.next()) |e| {
            if (s.let_go.contains(e.key_ptr.*)) continue;
            const item = rp.held.get(e.key_ptr.*).?;
            var n = e.value_ptr.*;
            while (n > 0) : (n -= 1) s.queueReleaseQuiet(item.key.slice(), e.key_ptr.*, false);
        }
        var lit = s.let_go.keyIterator();
        var drop = std.ArrayList(u64).init(a);
        defer drop.deinit();
        while (lit.next()) |t| if (!rp.held.contains(t.*)) drop.append(t.*) catch {};
        for (drop.items) |t| _ = s.let_go.remove(t);
    }
};

fn setTimeout(sock: posix.socket_t, opt: u32, ns: u64) void {
    const tv = posix.timeval{
        .sec = @intCast(ns / std.time.ns_per_s),
        .usec = @intCast((ns % std.time.ns_per_s) / std.time.ns_per_us),
    };
    posix.setsockopt(sock, posix.SOL.SOCKET, opt, std.mem.asBytes(&tv)) catch {};
}

/// Connects to address within bound ns; the socket it returns blocks.
fn dialTcp(allocator: Allocator, address: []const u8, bound: u64) Error!posix.socket_t {
    const hp = try splitHostPort(address);
    if (std.net.Address.parseIp(hp.host, hp.port)) |addr| {
        return connectOne(addr, bound);
    } else |_| {}
    const list = std.net.getAddressList(allocator, hp.host, hp.port) catch return error.UnknownHostName;
    defer list.deinit();
    var last: Error = error.UnknownHostName;
    for (list.addrs) |addr| {
        return connectOne(addr, bound) catch |e| {
            last = e;
            continue;
        };
    }
    return last;
}

fn connectOne(addr: std.net.Address, bound: u64) Error!posix.socket_t {
    const sock = posix.socket(addr.any.family, posix.SOCK.STREAM | posix.SOCK.NONBLOCK | posix.SOCK.CLOEXEC, posix.IPPROTO.TCP) catch
        return error.SystemResources;
    errdefer posix.close(sock);
    posix.connect(sock, &addr.any, addr.getOsSockLen()) catch |e| switch (e) {
        error.WouldBlock => {
            var p = [1]posix.pollfd{.{ .fd = sock, .events = posix.POLL.OUT, .revents = 0 }};
            const ms: i32 = @intCast(@min(bound / ns_per_ms + 1, std.math.maxInt(i32)));
            const n = posix.poll(&p, ms) catch return error.SystemResources;
            if (n == 0) return error.ConnectTimedOut;
            posix.getsockoptError(sock) catch |x| return connect_failure.of(x);
        },
        else => return connect_failure.of(e),
    };
    const flags = posix.fcntl(sock, posix.F.GETFL, 0) catch return error.SystemResources;
    const nonblock: usize = @as(u32, @bitCast(posix.O{ .NONBLOCK = true }));
    _ = posix.fcntl(sock, posix.F.SETFL, flags & ~nonblock) catch return error.SystemResources;
    const one: c_int = 1;
    posix.setsockopt(sock, posix.IPPROTO.TCP, posix.TCP.NODELAY, std.mem.asBytes(&one)) catch {};
    return sock;
}
