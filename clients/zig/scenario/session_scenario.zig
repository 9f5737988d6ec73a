//! The session scenarios of clients/conformance/SESSIONS.md for the Zig
//! client, in that file's order:
//!
//!     session-scenario [ID...]
//!
//! One line per scenario on stdout, "ok <id>" or "FAIL <id>: <reason>";
//! chatter on stderr. Each scenario reads only the variables it needs
//! (LC_ADDR, LC_MANAGER_ADDR, LC_PROBE, ...). Exits 1 when one failed.
//! With LC_SESSION_CHILD set it is instead s-kill-client's child: it holds
//! the keys its arguments name at LC_ADDR and waits to be killed.

const std = @import("std");
const lc = @import("lockingcenter");

var gpa_state = std.heap.GeneralPurposeAllocator(.{ .thread_safe = true }){};
const gpa = gpa_state.allocator();
var arena_state = std.heap.ArenaAllocator.init(std.heap.page_allocator);
const arena = arena_state.allocator();

const ns_per_ms = std.time.ns_per_ms;

var run_id: [6]u8 = undefined;
var reason_buf: [1024]u8 = undefined;
var reason: []const u8 = "";

/// Records why the scenario failed.
fn fail(comptime fmt: []const u8, args: anytype) error{ScenarioFailed} {
    reason = std.fmt.bufPrint(&reason_buf, fmt, args) catch "(reason too long)";
    return error.ScenarioFailed;
}

fn log(comptime fmt: []const u8, args: anytype) void {
    std.debug.print("  " ++ fmt ++ "\n", args);
}

fn env(name: []const u8) ![]const u8 {
    const v = std.posix.getenv(name) orelse "";
    if (v.len == 0) return fail("{s} is not set", .{name});
    return v;
}

/// A key of this run: zig/<name>/<run>.
fn key(name: []const u8) []const u8 {
    return std.fmt.allocPrint(arena, "zig/{s}/{s}", .{ name, run_id }) catch "zig/oom";
}

fn millis() i64 {
    return std.time.milliTimestamp();
}

// ---- the probe ---------------------------------------------------------------

/// Runs the probe with args; its stdout, or a failure when it exits non-zero.
fn probe(args: []const []const u8) ![]const u8 {
    var argv = std.ArrayList([]const u8).init(arena);
    try argv.append(try env("LC_PROBE"));
    try argv.appendSlice(args);
    const r = try std.process.Child.run(.{ .allocator = arena, .argv = argv.items });
    const ok = switch (r.term) {
        .Exited => |c| c == 0,
        else => false,
    };
    if (!ok) return fail("probe {s}: {any}: {s}", .{ args[0], r.term, std.mem.trim(u8, r.stderr, "\n") });
    return r.stdout;
}

fn waiters(manager: []const u8, k: []const u8, n: usize) !void {
    _ = try probe(&.{ "waiters", manager, k, try std.fmt.allocPrint(arena, "{d}", .{n}) });
}

const Holder = struct { token: u64, session: u64, note: []const u8 };

fn holders(manager: []const u8, k: []const u8) ![]Holder {
    const out = try probe(&.{ "holders", manager, k });
    var list = std.ArrayList(Holder).init(arena);
    var lines = std.mem.tokenizeScalar(u8, out, '\n');
    while (lines.next()) |line| {
        var it = std.mem.splitScalar(u8, line, ' ');
        const token = try std.fmt.parseInt(u64, it.next() orelse "", 10);
        const session = try std.fmt.parseInt(u64, it.next() orelse "0", 10);
        try list.append(.{ .token = token, .session = session, .note = it.rest() });
    }
    return list.items;
}

fn expectHeld(manager: []const u8, k: []const u8, token: u64) !void {
    const hs = try holders(manager, k);
    if (hs.len != 1 or hs[0].token != token) {
        var got = std.ArrayList(u8).init(arena);
        for (hs) |h| try got.writer().print(" {d}", .{h.token});
        return fail("holders of {s}:{s}, want {d}", .{ k, got.items, token });
    }
}

fn leaderManager(managers: []const []const u8) ![]const u8 {
    const joined = try std.mem.join(arena, ",", managers);
    const out = try probe(&.{ "leader", joined });
    const i = try std.fmt.parseInt(usize, std.mem.trim(u8, out, " \n"), 10);
    if (i >= managers.len) return fail("probe leader said {d}", .{i});
    return managers[i];
}

fn split(list: []const u8) ![]const []const u8 {
    var out = std.ArrayList([]const u8).init(arena);
    var it = std.mem.tokenizeScalar(u8, list, ',');
    while (it.next()) |p| try out.append(p);
    return out.items;
}

// ---- sessions and waiters -------------------------------------------------------

fn connect(address: []const u8, options: lc.SessionOptions) !*lc.Session {
    return lc.Session.connect(gpa, address, options) catch |e| fail("connect to {s}: {s}", .{ address, @errorName(e) });
}

/// An acquire on a thread of its own.
const Pending = struct {
    session: *lc.Session,
    key: []const u8,
    options: lc.AcquireOptions = .{},
    /// Release at once once granted, noting the grant in order.
    release: ?*Order = null,
    name: []const u8 = "",
    done: std.Thread.ResetEvent = .{},
    result: lc.SessionError!lc.Lock = error.Protocol,
    thread: ?std.Thread = null,

    fn start(p: *Pending) !void {
        p.thread = try std.Thread.spawn(.{}, run, .{p});
    }

    fn run(p: *Pending) void {
        p.result = p.session.acquire(p.key, p.options);
        if (p.release) |o| if (p.result) |*l| {
            o.note(p.name, l.token());
            l.release();
        } else |_| {};
        p.done.set();
    }

    /// Waits at most ms for the acquire; its lock, or a failure.
    fn wait(p: *Pending, ms: u64, what: []const u8) !lc.Lock {
        p.done.timedWait(ms * ns_per_ms) catch return fail("{s}: no answer within {d} ms", .{ what, ms });
        if (p.thread) |t| t.join();
        p.thread = null;
        return p.result catch |e| fail("{s}: {s}", .{ what, @errorName(e) });
    }
};

/// The order in which waiters were granted.
const Order = struct {
    mutex: std.Thread.Mutex = .{},
    names: [8][]const u8 = undefined,
    tokens: [8]u64 = undefined,
    n: usize = 0,

    fn note(o: *Order, name: []const u8, token: u64) void {
        o.mutex.lock();
        defer o.mutex.unlock();
        if (o.n < o.names.len) {
            o.names[o.n] = name;
            o.tokens[o.n] = token;
            o.n += 1;
        }
    }
};

// ---- the scenarios ------------------------------------------------------------

fn acquireRelease() !void {
    const addr = try env("LC_ADDR");
    const manager = try env("LC_MANAGER_ADDR");
    const k = key("acquire-release");
    const s = try connect(addr, .{ .name = "zig-acquire-release" });
    defer s.close();
    var first = try s.acquire(k, .{});
    try expectHeld(manager, k, first.token());
    try first.releaseChecked();
    var second = try s.acquire(k, .{});
    if (second.token() <= first.token()) return fail("second token {d} not above the first {d}", .{ second.token(), first.token() });
    try second.releaseChecked();
    second.releaseChecked() catch |e| return fail("releasing a released lock again: {s}", .{@errorName(e)});
    second.release();
}

fn tryBusy() !void {
    const addr = try env("LC_ADDR");
    const k = key("try-busy");
    const h = try connect(addr, .{ .name = "zig-holder" });
    defer h.close();
    const t = try connect(addr, .{ .name = "zig-try" });
    defer t.close();
    var held = try h.acquire(k, .{});
    defer held.release();
    if (try t.tryAcquire(k, .{})) |got| {
        var g = got;
        g.release();
        return fail("a try of a held key was granted, token {d}", .{got.token()});
    }
}

fn waitBound() !void {
    const addr = try env("LC_ADDR");
    const manager = try env("LC_MANAGER_ADDR");
    const k = key("wait-bound");
    const h = try connect(addr, .{ .name = "zig-holder" });
    defer h.close();
    const w = try connect(addr, .{ .name = "zig-waiter" });
    defer w.close();
    var held = try h.acquire(k, .{});
    defer held.release();
    const start = millis();
    var diag: lc.Diagnostics = .{};
    if (w.acquire(k, .{ .wait_ms = 500, .diagnostics = &diag })) |got| {
        var g = got;
        g.release();
        return fail("an acquire with a wait of 500 ms of a held key was granted", .{});
    } else |e| if (e != error.Timeout) return fail("the bounded wait gave {s}, want Timeout", .{@errorName(e)});
    const took = millis() - start;
    if (took < 450 or took > 3000) return fail("the wait bound of 500 ms took {d} ms", .{took});
    if (diag.code != 2) return fail("the timeout without the server's code: {d}", .{diag.code});
    try waiters(manager, k, 0);
}

fn cancelWait() !void {
    const addr = try env("LC_ADDR");
    const manager = try env("LC_MANAGER_ADDR");
    const k = key("cancel");
    const h = try connect(addr, .{ .name = "zig-holder" });
    defer h.close();
    const b = try connect(addr, .{ .name = "zig-b" });
    defer b.close();
    var held = try h.acquire(k, .{});
    defer held.release();

    var cancel = lc.Cancel{};
    var p = Pending{ .session = b, .key = k, .options = .{ .cancel = &cancel } };
    try p.start();
    try waiters(manager, k, 1);
    const start = millis();
    cancel.cancel();
    p.done.timedWait(5000 * ns_per_ms) catch return fail("the cancelled acquire did not return", .{});
    p.thread.?.join();
    p.thread = null;
    if (p.result) |got| {
        var g = got;
        g.release();
        return fail("the cancelled acquire was granted", .{});
    } else |e| if (e != error.Cancelled) return fail("the cancelled acquire gave {s}", .{@errorName(e)});
    try waiters(manager, k, 0);
    const took = millis() - start;
    if (took > 1000) return fail("the queue emptied {d} ms after the cancel, want 1 s", .{took});

    var next = Pending{ .session = b, .key = k };
    try next.start();
    try waiters(manager, k, 1);
    held.release();
    var got = try next.wait(10_000, "the next waiter");
    got.release();
}

fn staleRelease() !void {
    const addr = try env("LC_ADDR");
    const manager = try env("LC_MANAGER_ADDR");
    const k = key("stale-release");
    const h = try connect(addr, .{ .name = "zig-holder" });
    defer h.close();
    const o = try connect(addr, .{ .name = "zig-other" });
    defer o.close();
    var lk = try h.acquire(k, .{});
    defer lk.release();
    const cases = [_]struct { who: []const u8, s: *lc.Session, token: u64 }{
        .{ .who = "another session", .s = o, .token = lk.token() },
        .{ .who = "a wrong token", .s = h, .token = lk.token() + 1 },
    };
    for (cases) |c| {
        var diag: lc.Diagnostics = .{};
        if (c.s.releaseToken(k, c.token, &diag)) {
            return fail("a release by {s} was not refused", .{c.who});
        } else |e| if (e != error.StaleToken) return fail("a release by {s} gave {s}, want StaleToken", .{ c.who, @errorName(e) });
        log("{s}: refused: {s}", .{ c.who, diag.message() });
    }
    try expectHeld(manager, k, lk.token());
    if (lk.lost()) |why| return fail("the real holder's lock ended: {s}", .{why.text()});
}

fn leaseExpiry() !void {
    const addr = try env("LC_ADDR");
    const k = key("lease-expiry");
    const s = try connect(addr, .{ .name = "zig-lease" });
    defer s.close();
    const o = try connect(addr, .{ .name = "zig-after" });
    defer o.close();
    const asked = millis();
    var lk = try s.acquire(k, .{ .lease_ms = 500, .delay_ms = 2000 });
    defer lk.release();
    const left: u64 = @intCast(@max(0, asked + 2000 - millis()));
    const why = lk.waitLost(left) orelse return fail("a lock with a lease of 500 ms not reported lost within 2 s", .{});
    const lost_at = millis();
    log("lost after {d} ms: {s}", .{ lost_at - asked, why.text() });
    if (why != .lease_expired) return fail("lost with {s}, want lease expired", .{why.text()});
    if (try o.tryAcquire(k, .{})) |got| {
        var g = got;
        g.release();
        return fail("a try right after the loss was granted: no lock-delay", .{});
    }
    var after = o.acquire(k, .{ .wait_ms = 5000 }) catch |e| return fail("the wait after the loss: {s}", .{@errorName(e)});
    defer after.release();
    const took = millis() - lost_at;
    log("granted to the second session {d} ms after the loss", .{took});
    if (took > 5000) return fail("granted {d} ms after the loss, want 5 s", .{took});
}

fn killChild() u8 {
    const addr = std.posix.getenv("LC_ADDR") orelse return 1;
    const s = lc.Session.connect(gpa, addr, .{ .name = "zig-kill-child", .ttl_ms = 2000 }) catch return 1;
    var args = std.process.args();
    _ = args.next();
    const out = std.io.getStdOut().writer();
    var line = std.ArrayList(u8).init(arena);
    line.appendSlice("held") catch return 1;
    while (args.next()) |k| {
        const l = s.acquire(k, .{ .delay_ms = 1000 }) catch return 1;
        line.writer().print(" {d}", .{l.token()}) catch return 1;
    }
    line.append('\n') catch return 1;
    out.writeAll(line.items) catch return 1;
    var buf: [64]u8 = undefined;
    while ((std.io.getStdIn().read(&buf) catch 0) > 0) {}
    return 0;
}

fn killClient() !void {
    const addr = try env("LC_ADDR");
    const manager = try env("LC_MANAGER_ADDR");
    const keys = [_][]const u8{ key("kill-1"), key("kill-2"), key("kill-3") };
    var exe_buf: [std.fs.max_path_bytes]u8 = undefined;
    const exe = try std.fs.selfExePath(&exe_buf);
    var child = std.process.Child.init(&.{ exe, keys[0], keys[1], keys[2] }, arena);
    var child_env = try std.process.getEnvMap(arena);
    try child_env.put("LC_SESSION_CHILD", "1");
    child.env_map = &child_env;
    child.stdin_behavior = .Pipe;
    child.stdout_behavior = .Pipe;
    try child.spawn();
    var killed_done = false;
    defer if (!killed_done) {
        _ = child.kill() catch {};
    };
    var line_buf: [256]u8 = undefined;
    const line = (try child.stdout.?.reader().readUntilDelimiterOrEof(&line_buf, '\n')) orelse "";
    var it = std.mem.tokenizeScalar(u8, line, ' ');
    if (!std.mem.eql(u8, it.next() orelse "", "held")) return fail("the child said {s}", .{line});
    var tokens: [3]u64 = undefined;
    for (&tokens) |*t| t.* = std.fmt.parseInt(u64, it.next() orelse "", 10) catch return fail("the child said {s}", .{line});
    try std.posix.kill(child.id, std.posix.SIG.KILL);
    const killed = millis();
    _ = try child.wait();
    killed_done = true;
    const s = try connect(addr, .{ .name = "zig-after-kill" });
    defer s.close();
    std.time.sleep(@intCast(@max(0, killed + 1000 - millis()) * ns_per_ms));
    for (keys, tokens) |k, t| try expectHeld(manager, k, t);
    for (keys) |k| {
        const left: u32 = @intCast(@max(0, killed + 5000 - millis()));
        var l = s.acquire(k, .{ .wait_ms = left }) catch |e| return fail("{s} within 5 s of the kill: {s}", .{ k, @errorName(e) });
        log("{s} free {d} ms after the kill", .{ k, millis() - killed });
        l.release();
    }
}

fn resumeCut() !void {
    const addr = try env("LC_ADDR");
    const manager = try env("LC_MANAGER_ADDR");
    const proxy = try env("LC_PROXY_ADDR");
    const ctl = try env("LC_PROXY_CTL");
    const ka = key("resume-a");
    const kb = key("resume-b");
    const s = try connect(proxy, .{ .name = "zig-resume", .ttl_ms = 5000 });
    defer s.close();
    const o = try connect(addr, .{ .name = "zig-resume-other" });
    defer o.close();
    var a = try s.acquire(ka, .{});
    defer a.release();
    var b = try o.acquire(kb, .{});
    var p = Pending{ .session = s, .key = kb };
    try p.start();
    try waiters(manager, kb, 1);
    _ = try probe(&.{ "cut", ctl });
    b.release();
    var got = try p.wait(10_000, "the parked acquire after the cut");
    defer got.release();
    try expectHeld(manager, ka, a.token());
    try expectHeld(manager, kb, got.token());
    if (a.lost()) |why| return fail("lock A lost over the cut: {s}", .{why.text()});
}

fn without(list: []const []const u8, i: usize) []const []const u8 {
    var out = std.ArrayList([]const u8).init(arena);
    for (list, 0..) |x, j| if (j != i) out.append(x) catch {};
    return out.items;
}

fn leaderStop() !void {
    const cluster = try env("LC_CLUSTER");
    const managers = try split(try env("LC_CLUSTER_MANAGER"));
    const k = key("leader-stop");
    const s = try connect(cluster, .{ .name = "zig-leader-stop", .ttl_ms = 3000 });
    defer s.close();
    var lk = try s.acquire(k, .{});
    defer lk.release();
    const stopped = try std.fmt.parseInt(usize, std.mem.trim(u8, try probe(&.{ "signal-leader", "STOP" }), " \n"), 10);
    log("stopped node {d}", .{stopped});
    std.time.sleep(6 * std.time.ns_per_s);
    _ = try probe(&.{ "signal-leader", "CONT" });
    if (s.failure()) |e| return fail("the session ended: {s}", .{@errorName(e)});
    if (lk.lost()) |why| return fail("the lock was lost: {s}", .{why.text()});
    try expectHeld(try leaderManager(without(managers, stopped)), k, lk.token());
}

fn leaderKill() !void {
    const cluster = try env("LC_CLUSTER");
    const managers = try split(try env("LC_CLUSTER_MANAGER"));
    const k1 = key("leader-kill-1");
    const k2 = key("leader-kill-2");
    const s = try connect(cluster, .{ .name = "zig-leader-kill", .ttl_ms = 5000 });
    defer s.close();
    const o = try connect(cluster, .{ .name = "zig-leader-kill-2", .ttl_ms = 5000 });
    defer o.close();
    var held = try s.acquire(k1, .{});
    defer held.release();
    var other = try o.acquire(k2, .{});
    var p = Pending{ .session = s, .key = k2 };
    try p.start();
    try waiters(try leaderManager(managers), k2, 1);
    const killed = try std.fmt.parseInt(usize, std.mem.trim(u8, try probe(&.{ "signal-leader", "KILL" }), " \n"), 10);
    log("killed node {d}", .{killed});
    const live = without(managers, killed);
    try expectHeld(try leaderManager(live), k1, held.token());
    other.releaseChecked() catch |e| return fail("the second session's release after the failover: {s}", .{@errorName(e)});
    var got = try p.wait(15_000, "the parked acquire after the failover");
    defer got.release();
    try expectHeld(try leaderManager(live), k2, got.token());
    if (held.lost()) |why| return fail("the held lock was lost: {s}", .{why.text()});
}

fn tlsToken() !void {
    const addr = try env("LC_TLS_ADDR");
    const ca = try env("LC_CA_FILE");
    const token = try env("LC_TOKEN");
    const tls = lc.TlsOptions{ .ca_file = ca, .server_name = "localhost" };
    {
        const s = try connect(addr, .{ .name = "zig-tls", .token = token, .tls = tls });
        defer s.close();
        var l = try s.acquire(key("tls"), .{});
        try l.releaseChecked();
        var diag: lc.Diagnostics = .{};
        if (s.acquire("outside/zig", .{ .diagnostics = &diag })) |got| {
            var g = got;
            g.release();
            return fail("a key outside zig/ was granted", .{});
        } else |e| if (e != error.Forbidden) return fail("a key outside zig/ gave {s}, want Forbidden", .{@errorName(e)});
        log("outside zig/: {s}", .{diag.message()});
    }
    const wrong = try std.fmt.allocPrint(arena, "{s}-wrong", .{token});
    var diag: lc.Diagnostics = .{};
    if (lc.Session.connect(gpa, addr, .{ .name = "zig-tls", .token = wrong, .tls = tls, .diagnostics = &diag })) |s| {
        s.close();
        return fail("a wrong token opened a session", .{});
    } else |e| if (e != error.Unauthenticated) return fail("a wrong token gave {s}, want Unauthenticated", .{@errorName(e)});
    log("a wrong token: {s}", .{diag.message()});
}

fn modes() !void {
    const addr = try env("LC_ADDR");
    const manager = try env("LC_MANAGER_ADDR");
    var ss: [3]*lc.Session = undefined;
    for (&ss, 0..) |*s, i| s.* = try connect(addr, .{ .name = try std.fmt.allocPrint(arena, "zig-m{d}", .{i}) });
    defer for (ss) |s| s.close();
    const a = ss[0];
    const b = ss[1];
    const c = ss[2];

    const ks = key("shared");
    var r1 = try a.acquire(ks, .{ .shared = true });
    var r2 = try b.acquire(ks, .{ .shared = true });
    const hs = try holders(manager, ks);
    if (hs.len != 2) return fail("shared: {d} holders, want 2", .{hs.len});
    r1.release();
    r2.release();

    const kp = key("pool");
    var p1 = try a.acquire(kp, .{ .limit = 2 });
    var p2 = try b.acquire(kp, .{ .limit = 2 });
    if (try c.tryAcquire(kp, .{ .limit = 2 })) |got| {
        var g = got;
        g.release();
        return fail("a third try of a semaphore of 2 was granted", .{});
    }
    if ((try holders(manager, kp)).len != 2) return fail("the semaphore has not two holders", .{});
    p1.release();
    p2.release();

    const kr = key("reentrant");
    var x = try a.acquire(kr, .{ .reentrant = true, .owner = "job" });
    var y = try a.acquire(kr, .{ .reentrant = true, .owner = "job" });
    if (x.token() != y.token()) return fail("reentrant tokens {d} and {d}", .{ x.token(), y.token() });
    y.release();
    try expectHeld(manager, kr, x.token());
    x.release();

    const kq = key("priority");
    var h = try a.acquire(kq, .{});
    var order = Order{};
    var low = Pending{ .session = b, .key = kq, .options = .{ .priority = 1 }, .release = &order, .name = "low" };
    try low.start();
    try waiters(manager, kq, 1);
    var high = Pending{ .session = c, .key = kq, .options = .{ .priority = 5 }, .release = &order, .name = "high" };
    try high.start();
    try waiters(manager, kq, 2);
    h.release();
    _ = try low.wait(10_000, "the low-priority waiter");
    _ = try high.wait(10_000, "the high-priority waiter");
    if (order.n != 2 or !std.mem.eql(u8, order.names[0], "high")) return fail("grant order {s} then {s}, want the higher priority first", .{ order.names[0], order.names[1] });
}

fn note() !void {
    const addr = try env("LC_ADDR");
    const manager = try env("LC_MANAGER_ADDR");
    const k = key("note");
    const text = "nightly build 42 on ci-7, ünïcode";
    const s = try connect(addr, .{ .name = "zig-note" });
    defer s.close();
    var lk = try s.acquire(k, .{ .note = text });
    defer lk.release();
    const hs = try holders(manager, k);
    if (hs.len != 1 or hs[0].token != lk.token() or hs[0].session != s.sessionId() or !std.mem.eql(u8, hs[0].note, text))
        return fail("holders show {any}, want token {d}, session {d} and the note", .{ hs, lk.token(), s.sessionId() });
}

fn bigToken() !void {
    const addr = try env("LC_BIG_ADDR");
    const manager = try env("LC_BIG_MANAGER");
    const k = key("big-token");
    const s = try connect(addr, .{ .name = "zig-big" });
    defer s.close();
    var lk = try s.acquire(k, .{});
    defer lk.release();
    if (lk.token() <= 1 << 63) return fail("token {d} is not above 2^63", .{lk.token()});
    try expectHeld(manager, k, lk.token());
    log("token {d}", .{lk.token()});
}

fn silentServer() !void {
    const addr = try env("LC_SILENT_ADDR");
    const start = millis();
    if (lc.Session.connect(gpa, addr, .{ .name = "zig-silent", .read_timeout_ms = 3000 })) |s| {
        s.close();
        return fail("a session opened at a silent server", .{});
    } else |e| if (e != error.ConnectTimedOut) return fail("the silent server gave {s}, want ConnectTimedOut", .{@errorName(e)});
    const took = millis() - start;
    if (took > 10_000) return fail("the timeout took {d} ms", .{took});
}

fn fifoMixed() !void {
    const addr = try env("LC_ADDR");
    const manager = try env("LC_MANAGER_ADDR");
    const probe_bin = try env("LC_PROBE");
    const k = key("fifo-mixed");
    var ss: [4]*lc.Session = undefined;
    for (&ss, 0..) |*s, i| s.* = try connect(addr, .{ .name = try std.fmt.allocPrint(arena, "zig-f{d}", .{i}) });
    defer for (ss) |s| s.close();
    var held = try ss[0].acquire(k, .{});
    var order = Order{};
    var mine: [3]Pending = undefined;
    var children: [2]std.process.Child = undefined;
    var started: usize = 0;
    defer for (children[0..started]) |*ch| {
        _ = ch.kill() catch {};
    };
    const names = [_][]const u8{ "0", "1", "2", "3", "4" };
    for (0..5) |i| {
        if (i % 2 == 0) {
            mine[i / 2] = .{ .session = ss[1 + i / 2], .key = k, .release = &order, .name = names[i] };
            try mine[i / 2].start();
        } else {
            const ch = &children[i / 2];
            ch.* = std.process.Child.init(&.{ probe_bin, "session-lock", addr, k }, arena);
            ch.stdin_behavior = .Pipe;
            ch.stdout_behavior = .Pipe;
            try ch.spawn();
            started += 1;
        }
        try waiters(manager, k, i + 1);
    }
    held.release();
    for (&children, 0..) |*ch, j| {
        var buf: [128]u8 = undefined;
        const line = (try ch.stdout.?.reader().readUntilDelimiterOrEof(&buf, '\n')) orelse "";
        if (!std.mem.startsWith(u8, line, "granted ")) return fail("probe session-lock said {s}", .{line});
        order.note(names[2 * j + 1], try std.fmt.parseInt(u64, line["granted ".len..], 10));
        ch.stdin.?.close();
        ch.stdin = null;
        _ = try ch.wait();
    }
    started = 0;
    for (&mine) |*p| _ = try p.wait(10_000, "a Zig waiter");
    // By token: the grants' order.
    var by_token: [5]usize = .{ 0, 1, 2, 3, 4 };
    std.mem.sort(usize, &by_token, &order, struct {
        fn less(o: *Order, x: usize, y: usize) bool {
            return o.tokens[x] < o.tokens[y];
        }
    }.less);
    var got: [5][]const u8 = undefined;
    for (by_token, 0..) |i, j| got[j] = order.names[i];
    const want = [_][]const u8{ "0", "1", "2", "3", "4" };
    for (got, want) |g, w| if (!std.mem.eql(u8, g, w)) return fail("granted in the order {s}, want 0 1 2 3 4", .{got});
}

const scenarios = [_]struct { id: []const u8, run: *const fn () anyerror!void }{
    .{ .id = "s-acquire-release", .run = acquireRelease },
    .{ .id = "s-try-busy", .run = tryBusy },
    .{ .id = "s-wait-bound", .run = waitBound },
    .{ .id = "s-cancel", .run = cancelWait },
    .{ .id = "s-stale-release", .run = staleRelease },
    .{ .id = "s-lease-expiry", .run = leaseExpiry },
    .{ .id = "s-kill-client", .run = killClient },
    .{ .id = "s-resume", .run = resumeCut },
    .{ .id = "s-leader-stop", .run = leaderStop },
    .{ .id = "s-leader-kill", .run = leaderKill },
    .{ .id = "s-tls-token", .run = tlsToken },
    .{ .id = "s-modes", .run = modes },
    .{ .id = "s-note", .run = note },
    .{ .id = "s-big-token", .run = bigToken },
    .{ .id = "s-silent-server", .run = silentServer },
    .{ .id = "s-fifo-mixed", .run = fifoMixed },
};

pub fn main() !u8 {
    if (std.posix.getenv("LC_SESSION_CHILD") != null) return killChild();
    const hex = "0123456789abcdef";
    var seed: [6]u8 = undefined;
    std.crypto.random.bytes(&seed);
    for (&run_id, seed) |*c, r| c.* = hex[r % 16];
    const args = try std.process.argsAlloc(arena);
    const out = std.io.getStdOut().writer();
    var code: u8 = 0;
    for (scenarios) |sc| {
        if (args.len > 1) {
            for (args[1..]) |a| {
                if (std.mem.eql(u8, a, sc.id)) break;
            } else continue;
        }
        std.debug.print("== {s}\n", .{sc.id});
        const start = millis();
        reason = "";
        if (sc.run()) {
            try out.print("ok {s}\n", .{sc.id});
        } else |e| {
            const why = if (e == error.ScenarioFailed) reason else @errorName(e);
            try out.print("FAIL {s}: {s}\n", .{ sc.id, why });
            code = 1;
        }
        log("{d} ms", .{millis() - start});
    }
    return code;
}
