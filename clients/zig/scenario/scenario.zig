//! The live conformance scenario of the Zig client. It runs against a
//! server the harness started and prints one line per scenario, "ok <id>"
//! or "FAIL <id>: <reason>".
//!
//! Environment: LC_ADDR (mutex port), LC_MANAGER_ADDR, LC_DEAD_ADDR (nothing
//! listens there), LC_SILENT_ADDR (accepts and never answers), LC_PROBE
//! (helper that inspects the server).

const std = @import("std");
const lc = @import("lockingcenter");

var gpa_state = std.heap.GeneralPurposeAllocator(.{}){};
const gpa = gpa_state.allocator();

var addr: []const u8 = undefined;
var manager_addr: []const u8 = undefined;
var dead_addr: []const u8 = undefined;
var silent_addr: []const u8 = undefined;
var probe: []const u8 = undefined;

var reason_buf: [512]u8 = undefined;
var reason: []const u8 = "";

/// Records why the scenario failed.
fn fail(comptime fmt: []const u8, args: anytype) error{ScenarioFailed} {
    reason = std.fmt.bufPrint(&reason_buf, fmt, args) catch "(reason too long)";
    return error.ScenarioFailed;
}

fn client(address: []const u8, source: []const u8) !lc.Client {
    return lc.Client.init(gpa, address, .{ .source = source });
}

/// Runs the probe; returns its exit code, its first output line in out.
fn runProbe(args: []const []const u8, out: []u8) !struct { code: u8, line: []const u8 } {
    var argv: [6][]const u8 = undefined;
    argv[0] = probe;
    for (args, 1..) |a, i| argv[i] = a;
    const r = try std.process.Child.run(.{ .allocator = gpa, .argv = argv[0 .. args.len + 1] });
    defer gpa.free(r.stdout);
    defer gpa.free(r.stderr);
    const first = std.mem.sliceTo(r.stdout, '\n');
    const n = @min(first.len, out.len);
    @memcpy(out[0..n], first[0..n]);
    const code: u8 = switch (r.term) {
        .Exited => |c| c,
        else => 255,
    };
    return .{ .code = code, .line = out[0..n] };
}

/// Waits until key has exactly n parked waiters.
fn awaitWaiters(key: []const u8, n: usize) !void {
    var count: [8]u8 = undefined;
    var out: [64]u8 = undefined;
    const r = try runProbe(&.{ "waiters", manager_addr, key, try std.fmt.bufPrint(&count, "{d}", .{n}) }, &out);
    if (r.code != 0) return fail("key {s} never had {d} waiter(s) (probe exit {d})", .{ key, n, r.code });
}

/// Fails unless the holder of key is want ("free" when nobody holds it).
fn expectHolder(key: []const u8, want: []const u8) !void {
    var hex_buf: [2 * lc.max_key_len]u8 = undefined;
    const hex = std.fmt.bufPrint(&hex_buf, "{}", .{std.fmt.fmtSliceHexLower(key)}) catch unreachable;
    var out: [256]u8 = undefined;
    const r = try runProbe(&.{ "holder", manager_addr, hex }, &out);
    if (r.code != 0) return fail("probe holder exit {d}", .{r.code});
    if (!std.mem.eql(u8, r.line, want)) return fail("holder of {s} is {s}, want {s}", .{ hex, r.line, want });
}

// ---- waiters on their own threads -----------------------------------------------

var mutex: std.Thread.Mutex = .{};
var changed: std.Thread.Condition = .{};
var order: [3]u8 = undefined; // fifo-three, guarded by mutex
var granted: usize = 0;

const Waiter = struct {
    client: *const lc.Client = undefined, // set by Scene.start
    key: []const u8 = "", // set by Scene.start
    cancel: ?*const lc.Canceller = null,
    turn: u8 = 0, // fifo-three: the waiter's number
    release: bool = false, // unlock once granted
    result: lc.Error!void = {},
    done: bool = false, // guarded by mutex
    thread: std.Thread = undefined,

    fn start(w: *Waiter) !void {
        w.thread = try std.Thread.spawn(.{}, run, .{w});
    }

    fn run(w: *Waiter) void {
        const r = w.client.lockWith(w.key, .{ .cancel = w.cancel });
        if (r) |_| {
            if (w.turn > 0) {
                mutex.lock();
                if (granted < order.len) order[granted] = w.turn;
                granted += 1;
                mutex.unlock();
            }
            if (w.release) w.client.unlock(w.key) catch {};
        } else |_| {}
        mutex.lock();
        defer mutex.unlock();
        w.result = r;
        w.done = true;
        changed.broadcast();
    }
};

/// The state of a scenario with waiters: the holder's client, the key, the
/// waiters' clients and threads.
const Scene = struct {
    holder: lc.Client,
    key: []const u8,
    clients: [3]lc.Client = undefined,
    ws: [3]Waiter = undefined,
    started: usize = 0,
    cancel: ?*const lc.Canceller = null,

    /// Starts waiter i on the client i, as w describes.
    fn start(s: *Scene, i: usize, w: Waiter) !void {
        s.ws[i] = w;
        s.ws[i].client = &s.clients[i];
        s.ws[i].key = s.key;
        try s.ws[i].start();
        s.started = i + 1;
    }

    fn allDone(s: *Scene) bool {
        for (s.ws[0..s.started]) |w| if (!w.done) return false;
        return true;
    }

    /// Waits up to 10 s for waiter i to return and gives its error, null
    /// when it was granted; fails when it does not return.
    fn awaitDone(s: *Scene, i: usize) !?lc.Error {
        var timer = try std.time.Timer.start();
        const limit = 10 * std.time.ns_per_s;
        mutex.lock();
        defer mutex.unlock();
        while (!s.ws[i].done) {
            const used = timer.read();
            if (used >= limit) return fail("waiter {d} on {s} did not return within 10 s", .{ i + 1, s.key });
            changed.timedWait(&mutex, limit - used) catch {};
        }
        s.ws[i].result catch |err| return @as(?lc.Error, err); // the payload, not the error of awaitDone
        return null;
    }

    /// Joins the waiters. After a failure some may still be parked: resets
    /// of the key grant them one by one until every thread has returned.
    fn settle(s: *Scene) void {
        mutex.lock();
        while (!s.allDone()) {
            mutex.unlock();
            s.holder.resetByKey(s.key) catch {};
            mutex.lock();
            if (!s.allDone()) changed.timedWait(&mutex, std.time.ns_per_s) catch {};
        }
        mutex.unlock();
        for (s.ws[0..s.started]) |w| w.thread.join();
        s.started = 0;
    }

    /// Runs body with the holder holding the key; whatever happens, the
    /// waiters are settled and the key is released afterwards.
    fn run(s: *Scene, body: *const fn (*Scene) anyerror!void) !void {
        try s.holder.lock(s.key);
        defer s.holder.unlock(s.key) catch {};
        defer s.settle();
        try body(s);
    }
};

// ---- scenarios -------------------------------------------------------------------

fn lockUnlock() !void {
    const k = "zig/lock-unlock";
    const c = try client(addr, "zig-one");
    try c.lock(k);
    try c.unlock(k);
    if (!try c.tryLock(k)) return fail("trylock after unlock was busy", .{});
    try c.unlock(k);
}

fn trylockBusy() !void {
    const k = "zig/trylock-busy";
    const a = try client(addr, "zig-a");
    const b = try client(addr, "zig-b");
    try a.lock(k);
    defer a.unlock(k) catch {};
    const got = b.tryLock(k) catch |err| return fail("trylock of a held key failed: {s}", .{@errorName(err)});
    if (got) return fail("trylock of a held key acquired it", .{});
}

fn fifoBody(s: *Scene) !void {
    for (0..3) |i| {
        try s.start(i, .{ .turn = @intCast(i + 1), .release = true });
        try awaitWaiters(s.key, i + 1);
    }
    try s.holder.unlock(s.key);
    for (0..3) |i| {
        if (try s.awaitDone(i)) |err| return fail("waiter {d}: {s}", .{ i + 1, @errorName(err) });
    }
    if (granted != 3 or !std.mem.eql(u8, &order, &[_]u8{ 1, 2, 3 })) {
        return fail("granted in order {d},{d},{d} ({d} grants), want 1,2,3", .{ order[0], order[1], order[2], granted });
    }
}

fn fifoThree() !void {
    var s = Scene{ .holder = try client(addr, "zig-holder"), .key = "zig/fifo-three" };
    s.clients = .{ try client(addr, "zig-w1"), try client(addr, "zig-w2"), try client(addr, "zig-w3") };
    granted = 0;
    try s.run(fifoBody);
}

fn waitHoldsNothing() !void {
    const k = "zig/wait-holds-nothing";
    const c = try client(addr, "zig-wait");
    try c.wait(k);
    if (!try c.tryLock(k)) return fail("key still held after wait", .{});
    try c.unlock(k);
}

fn resetKeyBody(s: *Scene) !void {
    try s.start(0, .{});
    try awaitWaiters(s.key, 1);
    try s.holder.resetByKey(s.key);
    if (try s.awaitDone(0)) |err| return fail("waiter after reset: {s}", .{@errorName(err)});
    try expectHolder(s.key, "zig-waiter");
}

fn resetKey() !void {
    var s = Scene{ .holder = try client(addr, "zig-holder"), .key = "zig/reset-key" };
    s.clients[0] = try client(addr, "zig-waiter");
    try s.run(resetKeyBody);
}

fn resetSourceBody(s: *Scene) !void {
    try s.start(0, .{ .release = true });
    try awaitWaiters(s.key, 1);
    try s.holder.resetBySource("zig-s2");
    const err = try s.awaitDone(0) orelse return fail("withdrawn lock was granted, want Failed", .{});
    if (err != error.Failed) return fail("withdrawn lock gave {s}, want Failed", .{@errorName(err)});
    try expectHolder(s.key, "zig-s1");
}

fn resetSourceWithdraws() !void {
    var s = Scene{ .holder = try client(addr, "zig-s1"), .key = "zig/reset-source-withdraws" };
    s.clients[0] = try client(addr, "zig-s2");
    try s.run(resetSourceBody);
}

fn key127Ok128Refused() !void {
    var key: [128]u8 = undefined;
    @memset(&key, 'k');
    @memcpy(key[0..12], "zig/key-127/");
    const c = try client(addr, "zig-long");
    try c.lock(key[0..127]);
    try c.unlock(key[0..127]);
    const dead = try client(dead_addr, "zig-long");
    dead.lock(&key) catch |err| {
        if (err == error.InvalidKey) return;
        return fail("128-byte key gave {s}, want InvalidKey", .{@errorName(err)});
    };
    return fail("128-byte key was locked", .{});
}

fn binaryKey() !void {
    const key = [_]u8{ 0x00, 0xff, 0x80, 'a' };
    const c = try client(addr, "zig-binary");
    try c.lock(&key);
    expectHolder(&key, "zig-binary") catch |err| {
        c.unlock(&key) catch {};
        return err;
    };
    try c.unlock(&key);
    try expectHolder(&key, "free");
}

fn refusedConnection() !void {
    const c = try client(dead_addr, "zig-dead");
    if (c.lock("zig/refused")) |_| {
        return fail("lock against nothing succeeded", .{});
    } else |err| if (err == error.InvalidKey) return fail("lock gave {s}, want a network error", .{@errorName(err)});
    if (c.tryLock("zig/refused")) |got| {
        return fail("trylock against nothing gave {s}", .{if (got) "acquired" else "busy"});
    } else |_| {}
}

fn cancelBody(s: *Scene) !void {
    try s.start(0, .{ .cancel = s.cancel });
    try awaitWaiters(s.key, 1);
    s.cancel.?.cancel();
    const err = try s.awaitDone(0) orelse return fail("cancelled lock was granted", .{});
    if (err != error.Cancelled) return fail("cancelled lock gave {s}", .{@errorName(err)});
    try awaitWaiters(s.key, 0);
    try s.start(1, .{});
    try awaitWaiters(s.key, 1);
    try s.holder.unlock(s.key);
    if (try s.awaitDone(1)) |e| return fail("second waiter: {s}", .{@errorName(e)});
    try expectHolder(s.key, "zig-b");
}

fn cancelWithdraws() !void {
    var cancel = try lc.Canceller.init();
    defer cancel.deinit();
    var s = Scene{ .holder = try client(addr, "zig-holder"), .key = "zig/cancel-withdraws", .cancel = &cancel };
    s.clients[0] = try client(addr, "zig-a");
    s.clients[1] = try client(addr, "zig-b");
    try s.run(cancelBody);
}

// ---- silent-server-times-out -----------------------------------------------------

/// The read timeout of silent-server-times-out, and the bound each call
/// must return well within, in milliseconds.
const silent_timeout_ms: u32 = 1000;
const silent_bound_ms: u64 = 10 * silent_timeout_ms;

/// A call that does not wait for a key, run on its own thread.
const SilentCall = struct {
    action: lc.Action,
    result: lc.Error!bool = false, // true for any success but a busy try-lock
    done: bool = false, // guarded by mutex

    fn run(sc: *SilentCall) void {
        const k = "zig/silent";
        const c = &silent_client;
        const r: lc.Error!bool = switch (sc.action) {
            .try_lock => c.tryLock(k),
            .unlock => if (c.unlock(k)) true else |e| e,
            .reset_key => if (c.resetByKey(k)) true else |e| e,
            else => if (c.resetBySource("zig-silent")) true else |e| e,
        };
        mutex.lock();
        defer mutex.unlock();
        sc.result = r;
        sc.done = true;
        changed.broadcast();
    }
};

// The client and the calls live as long as the program, so a call that
// never returns can be left behind.
var silent_client: lc.Client = undefined;
var silent_calls = [_]SilentCall{ .{ .action = .try_lock }, .{ .action = .unlock }, .{ .action = .reset_key }, .{ .action = .reset_source } };

fn silentServerTimesOut() !void {
    silent_client = try lc.Client.init(gpa, silent_addr, .{ .source = "zig-silent", .read_timeout_ms = silent_timeout_ms });
    const bound_ns = silent_bound_ms * std.time.ns_per_ms;
    for (&silent_calls) |*sc| {
        const name = @tagName(sc.action);
        const start = try std.time.Instant.now();
        const t = try std.Thread.spawn(.{}, SilentCall.run, .{sc});
        mutex.lock();
        while (!sc.done) {
            const waited = (std.time.Instant.now() catch start).since(start);
            if (waited >= bound_ns) break;
            changed.timedWait(&mutex, bound_ns - waited) catch {};
        }
        const done = sc.done;
        mutex.unlock();
        if (!done) {
            t.detach();
            return fail("{s} at a silent server did not return within {d} ms", .{ name, silent_bound_ms });
        }
        t.join();
        const took_ms = (try std.time.Instant.now()).since(start) / std.time.ns_per_ms;
        if (sc.result) |ok| {
            return fail("{s} at a silent server succeeded{s}", .{ name, if (ok) "" else " (busy)" });
        } else |err| if (err != error.ReadTimedOut) {
            return fail("{s} at a silent server gave {s}, want ReadTimedOut", .{ name, @errorName(err) });
        }
        if (took_ms >= silent_bound_ms) {
            return fail("{s} at a silent server took {d} ms, want well under {d}", .{ name, took_ms, silent_bound_ms });
        }
    }
}

pub fn main() !void {
    addr = std.posix.getenv("LC_ADDR") orelse return usage();
    manager_addr = std.posix.getenv("LC_MANAGER_ADDR") orelse return usage();
    dead_addr = std.posix.getenv("LC_DEAD_ADDR") orelse return usage();
    silent_addr = std.posix.getenv("LC_SILENT_ADDR") orelse return usage();
    probe = std.posix.getenv("LC_PROBE") orelse return usage();
    const scenarios = .{
        .{ "lock-unlock", lockUnlock },
        .{ "trylock-busy", trylockBusy },
        .{ "fifo-three", fifoThree },
        .{ "wait-holds-nothing", waitHoldsNothing },
        .{ "reset-key", resetKey },
        .{ "reset-source-withdraws", resetSourceWithdraws },
        .{ "key-127-ok-128-refused", key127Ok128Refused },
        .{ "binary-key", binaryKey },
        .{ "refused-connection", refusedConnection },
        .{ "cancel-withdraws", cancelWithdraws },
        .{ "silent-server-times-out", silentServerTimesOut },
    };
    const out = std.io.getStdOut().writer();
    var failures: usize = 0;
    inline for (scenarios) |s| {
        reason = "";
        if (s[1]()) |_| {
            try out.print("ok {s}\n", .{s[0]});
        } else |err| {
            failures += 1;
            const why = if (err == error.ScenarioFailed) reason else @errorName(err);
            try out.print("FAIL {s}: {s}\n", .{ s[0], why });
        }
    }
    if (failures > 0) std.process.exit(1);
}

fn usage() void {
    std.debug.print("scenario: LC_ADDR, LC_MANAGER_ADDR, LC_DEAD_ADDR, LC_SILENT_ADDR and LC_PROBE must be set\n", .{});
    std.process.exit(2);
}
