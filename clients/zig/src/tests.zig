//! Unit tests of the Zig client: the encoder and the answer table against
//! clients/testdata/vectors.json, byte for byte, and the network path
//! against a scripted server on 127.0.0.1.

const std = @import("std");
const lc = @import("lockingcenter");
const build_options = @import("build_options");

const posix = std.posix;
const testing = std.testing;
const Value = std.json.Value;

/// Where the vectors are: $LC_VECTORS, else the path build.zig passes.
fn loadVectors(allocator: std.mem.Allocator) !std.json.Parsed(Value) {
    const path = std.process.getEnvVarOwned(allocator, "LC_VECTORS") catch
        try allocator.dupe(u8, build_options.vectors_path);
    defer allocator.free(path);
    const content = try std.fs.cwd().readFileAlloc(allocator, path, 1 << 20);
    defer allocator.free(content);
    return std.json.parseFromSlice(Value, allocator, content, .{});
}

const Bytes = struct {
    buf: [512]u8 = undefined,
    len: usize = 0,

    fn slice(b: *const Bytes) []const u8 {
        return b.buf[0..b.len];
    }
};

/// The hex field name of v as bytes; an absent field is empty.
fn hexField(v: Value, name: []const u8) !Bytes {
    var out = Bytes{};
    const field = v.object.get(name) orelse return out;
    out.len = (try std.fmt.hexToBytes(&out.buf, field.string)).len;
    return out;
}

fn list(root: Value, name: []const u8) ![]const Value {
    const items = root.object.get(name).?.array.items;
    if (items.len == 0) {
        std.debug.print("no {s} in the vector file\n", .{name});
        return error.TestUnexpectedResult;
    }
    return items;
}

/// The action of v, through the file's own "actions" table.
fn actionOf(root: Value, v: Value) lc.Action {
    const n = root.object.get("actions").?.object.get(v.object.get("action").?.string).?.integer;
    return @enumFromInt(@as(u8, @intCast(n)));
}

fn text(v: Value, name: []const u8) []const u8 {
    return v.object.get(name).?.string;
}

/// Runs the client call for action: "ok", "busy" or "failed".
fn perform(c: *const lc.Client, action: lc.Action, key: []const u8, source: []const u8) []const u8 {
    const r: lc.Error!bool = switch (action) {
        .lock => if (c.lock(key)) true else |e| e,
        .unlock => if (c.unlock(key)) true else |e| e,
        .reset_key => if (c.resetByKey(key)) true else |e| e,
        .reset_source => if (c.resetBySource(source)) true else |e| e,
        .try_lock => c.tryLock(key),
    };
    const acquired = r catch return "failed";
    return if (acquired) "ok" else "busy";
}

// ---- a scripted server --------------------------------------------------------

const Reply = enum { answer, hang, close };

/// Serves conns connections, one request each, and answers them as told.
const Fake = struct {
    server: std.net.Server,
    replies: [4]Reply = undefined,
    answer: u8,
    conns: usize,
    gated: bool = false, // answers wait until open()
    is_open: bool = false, // guarded by mutex
    thread: std.Thread = undefined,
    mutex: std.Thread.Mutex = .{},
    cond: std.Thread.Condition = .{},
    got: [4]Bytes = [_]Bytes{.{}} ** 4,
    requests: usize = 0,
    peer_closed: bool = false,
    addr_buf: [32]u8 = undefined,
    addr_len: usize = 0,

    fn start(self: *Fake, conns: usize, reply: Reply, answer: u8) !void {
        const each = [_]Reply{reply} ** 4;
        try self.startEach(each[0..conns], answer, false);
    }

    /// Serves one connection per entry of replies (at most 4), the i-th as
    /// replies[i] says; with gated, answers wait until open().
    fn startEach(self: *Fake, replies: []const Reply, answer: u8, gated: bool) !void {
        const loopback = try std.net.Address.parseIp("127.0.0.1", 0);
        self.* = .{ .server = try loopback.listen(.{}), .answer = answer, .conns = replies.len, .gated = gated };
        @memcpy(self.replies[0..replies.len], replies);
        const port = self.server.listen_address.getPort();
        self.addr_len = (try std.fmt.bufPrint(&self.addr_buf, "127.0.0.1:{d}", .{port})).len;
        self.thread = try std.Thread.spawn(.{}, serve, .{self});
    }

    /// Lets a gated server answer.
    fn open(self: *Fake) void {
        self.mutex.lock();
        defer self.mutex.unlock();
        self.is_open = true;
        self.cond.broadcast();
    }

    fn addr(self: *const Fake) []const u8 {
        return self.addr_buf[0..self.addr_len];
    }

    fn waitRequests(self: *Fake, n: usize) void {
        self.mutex.lock();
        defer self.mutex.unlock();
        while (self.requests < n) self.cond.wait(&self.mutex);
    }

    /// Joins the server. Connections not yet made are refused, so a client
    /// that never connected cannot hang the test.
    fn stop(self: *Fake) void {
        posix.shutdown(self.server.stream.handle, .both) catch {};
        self.thread.join();
        self.server.deinit();
    }

    fn serve(self: *Fake) void {
        for (0..self.conns) |i| {
            const conn = self.server.accept() catch return;
            defer conn.stream.close();
            // A misbehaving client fails its test instead of hanging it.
            const limit = posix.timeval{ .sec = 10, .usec = 0 };
            posix.setsockopt(conn.stream.handle, posix.SOL.SOCKET, posix.SO.RCVTIMEO, std.mem.asBytes(&limit)) catch {};
            var b = Bytes{};
            while (requestLen(b.slice()) == 0) {
                const n = conn.stream.read(b.buf[b.len..]) catch break;
                if (n == 0) break;
                b.len += n;
            }
            self.mutex.lock();
            self.got[i] = b;
            self.requests += 1;
            self.cond.broadcast();
            self.mutex.unlock();
            switch (self.replies[i]) {
                .answer => {
                    self.mutex.lock();
                    while (self.gated and !self.is_open) self.cond.wait(&self.mutex);
                    self.mutex.unlock();
                    conn.stream.writeAll(&[_]u8{self.answer}) catch {};
                },
                .hang => {
                    var x: [1]u8 = undefined;
                    const closed = if (conn.stream.read(&x)) |n| n == 0 else |err| err != error.WouldBlock;
                    self.mutex.lock();
                    self.peer_closed = closed;
                    self.mutex.unlock();
                },
                .close => {},
            }
        }
    }
};

/// The length of the complete request at the start of b, or 0 while incomplete.
fn requestLen(b: []const u8) usize {
    if (b.len == 0) return 0;
    const action = b[0];
    var at: usize = 1;
    const fields = [2]bool{ action != 4, action == 1 or action == 5 or action == 4 };
    for (fields) |present| {
        if (!present) continue;
        if (b.len < at + 1 or b.len < at + 1 + b[at]) return 0;
        at += 1 + b[at];
    }
    return at;
}

/// Listens on 127.0.0.1 and never accepts: a client call that connects
/// leaves a pending connection behind.
const Silent = struct {
    server: std.net.Server,
    addr_buf: [32]u8 = undefined,
    addr_len: usize = 0,

    fn init() !Silent {
        const loopback = try std.net.Address.parseIp("127.0.0.1", 0);
        var s = Silent{ .server = try loopback.listen(.{ .force_nonblocking = true }) };
        s.addr_len = (try std.fmt.bufPrint(&s.addr_buf, "127.0.0.1:{d}", .{s.server.listen_address.getPort()})).len;
        return s;
    }

    fn addr(self: *const Silent) []const u8 {
        return self.addr_buf[0..self.addr_len];
    }

    /// Reports whether no connection reached the listener, and closes it.
    fn nothingPending(self: *Silent) bool {
        defer self.server.deinit();
        const conn = self.server.accept() catch |err| return err == error.WouldBlock;
        conn.stream.close();
        return false;
    }
};

// ---- tests -------------------------------------------------------------------

test "encoder matches vectors" {
    const parsed = try loadVectors(testing.allocator);
    defer parsed.deinit();
    var seen = [_]bool{false} ** 6;
    for (try list(parsed.value, "requests")) |v| {
        const action = actionOf(parsed.value, v);
        try testing.expectEqual(v.object.get("action_byte").?.integer, @intFromEnum(action));
        const key = try hexField(v, "key_hex");
        const source = try hexField(v, "source_hex");
        const want = try hexField(v, "request_hex");
        var buf: [lc.max_request_len]u8 = undefined;
        const got = try lc.encodeRequest(&buf, action, key.slice(), source.slice());
        testing.expectEqualSlices(u8, want.slice(), got) catch |err| {
            std.debug.print("vector {s}\n", .{text(v, "name")});
            return err;
        };
        seen[@intFromEnum(action)] = true;
    }
    for (seen[1..]) |s| try testing.expect(s);
}

test "answers match vectors" {
    const parsed = try loadVectors(testing.allocator);
    defer parsed.deinit();
    for (try list(parsed.value, "answers")) |v| {
        const answer = try hexField(v, "answer_hex");
        try testing.expectEqual(@as(usize, 1), answer.len);
        const got: []const u8 = if (lc.decodeAnswer(actionOf(parsed.value, v), answer.buf[0])) |o|
            (if (o == .busy) "busy" else "ok")
        else |_|
            "failed";
        testing.expectEqualStrings(text(v, "result"), got) catch |err| {
            std.debug.print("{s} answer {x:0>2}\n", .{ text(v, "action"), answer.buf[0] });
            return err;
        };
    }
}

test "client sends vector bytes" {
    const parsed = try loadVectors(testing.allocator);
    defer parsed.deinit();
    for (try list(parsed.value, "requests")) |v| {
        const key = try hexField(v, "key_hex");
        const source = try hexField(v, "source_hex");
        const want = try hexField(v, "request_hex");
        var fake: Fake = undefined;
        try fake.start(1, .answer, lc.answer_ok);
        const c = try lc.Client.init(testing.allocator, fake.addr(), .{ .source = source.slice() });
        const got = perform(&c, actionOf(parsed.value, v), key.slice(), source.slice());
        fake.stop();
        errdefer std.debug.print("vector {s}\n", .{text(v, "name")});
        try testing.expectEqualStrings("ok", got);
        try testing.expectEqualSlices(u8, want.slice(), fake.got[0].slice());
    }
}

test "client maps answers" {
    const parsed = try loadVectors(testing.allocator);
    defer parsed.deinit();
    for (try list(parsed.value, "answers")) |v| {
        const answer = try hexField(v, "answer_hex");
        var fake: Fake = undefined;
        try fake.start(1, .answer, answer.buf[0]);
        const c = try lc.Client.init(testing.allocator, fake.addr(), .{});
        const got = perform(&c, actionOf(parsed.value, v), "k", "");
        fake.stop();
        errdefer std.debug.print("{s} answer {x:0>2}\n", .{ text(v, "action"), answer.buf[0] });
        try testing.expectEqualStrings(text(v, "result"), got);
    }
    var fake: Fake = undefined;
    try fake.start(1, .answer, lc.answer_failed);
    const c = try lc.Client.init(testing.allocator, fake.addr(), .{});
    const r = c.lock("k");
    fake.stop();
    try testing.expectError(error.Failed, r);
}

test "invalid keys are never sent" {
    const parsed = try loadVectors(testing.allocator);
    defer parsed.deinit();
    var silent = try Silent.init();
    const c = try lc.Client.init(testing.allocator, silent.addr(), .{ .source = "src" });
    var cancel = try lc.Canceller.init();
    defer cancel.deinit();
    for (try list(parsed.value, "invalid_keys")) |v| {
        const key = try hexField(v, "key_hex");
        const k = key.slice();
        var buf: [lc.max_request_len]u8 = undefined;
        try testing.expectError(error.InvalidKey, c.lock(k));
        try testing.expectError(error.InvalidKey, c.lockWith(k, .{ .cancel = &cancel, .timeout_ms = 1000 }));
        try testing.expectError(error.InvalidKey, c.tryLock(k));
        try testing.expectError(error.InvalidKey, c.unlock(k));
        try testing.expectError(error.InvalidKey, c.wait(k));
        try testing.expectError(error.InvalidKey, c.resetByKey(k));
        try testing.expectError(error.InvalidKey, lc.encodeRequest(&buf, .lock, k, ""));
    }
    try testing.expect(silent.nothingPending());
}

test "invalid sources are never sent" {
    const parsed = try loadVectors(testing.allocator);
    defer parsed.deinit();
    var silent = try Silent.init();
    const c = try lc.Client.init(testing.allocator, silent.addr(), .{});
    for (try list(parsed.value, "invalid_sources")) |v| {
        const source = try hexField(v, "source_hex");
        var buf: [lc.max_request_len]u8 = undefined;
        try testing.expectError(error.InvalidSource, lc.Client.init(testing.allocator, silent.addr(), .{ .source = source.slice() }));
        try testing.expectError(error.InvalidSource, c.resetBySource(source.slice()));
        try testing.expectError(error.InvalidSource, lc.encodeRequest(&buf, .try_lock, "k", source.slice()));
    }
    try testing.expect(silent.nothingPending());
}

const LockJob = struct {
    client: *const lc.Client,
    opts: lc.WaitOptions,
    result: lc.Error!void = {},

    fn run(job: *LockJob) void {
        job.result = job.client.lockWith("k", job.opts);
    }
};

test "cancel closes the connection" {
    var fake: Fake = undefined;
    try fake.start(1, .hang, 0);
    const c = try lc.Client.init(testing.allocator, fake.addr(), .{});
    var cancel = try lc.Canceller.init();
    defer cancel.deinit();
    var job = LockJob{ .client = &c, .opts = .{ .cancel = &cancel } };
    const t = try std.Thread.spawn(.{}, LockJob.run, .{&job});
    fake.waitRequests(1);
    try testing.expect(!cancel.isCancelled());
    cancel.cancel();
    cancel.cancel();
    t.join();
    fake.stop();
    try testing.expectError(error.Cancelled, job.result);
    try testing.expect(fake.peer_closed);
    try testing.expect(cancel.isCancelled());

    // A fired handle stops a call before it connects.
    var silent = try Silent.init();
    const other = try lc.Client.init(testing.allocator, silent.addr(), .{});
    try testing.expectError(error.Cancelled, other.waitWith("k", .{ .cancel = &cancel }));
    try testing.expect(silent.nothingPending());
}

test "deadline closes the connection" {
    var fake: Fake = undefined;
    try fake.start(1, .hang, 0);
    const c = try lc.Client.init(testing.allocator, fake.addr(), .{});
    const r = c.lockWith("k", .{ .timeout_ms = 50 });
    fake.stop();
    try testing.expectError(error.DeadlinePassed, r);
    try testing.expect(fake.peer_closed);
}

test "wait locks then unlocks" {
    var fake: Fake = undefined;
    try fake.start(2, .answer, lc.answer_ok);
    const c = try lc.Client.init(testing.allocator, fake.addr(), .{ .source = "s" });
    const r = c.wait("key");
    fake.stop();
    try r;
    try testing.expectEqual(@as(usize, 2), fake.requests);
    try testing.expectEqualSlices(u8, "\x01\x03key\x01s", fake.got[0].slice());
    try testing.expectEqualSlices(u8, "\x02\x03key", fake.got[1].slice());
}

test "closed without an answer" {
    var fake: Fake = undefined;
    try fake.start(1, .close, 0);
    const c = try lc.Client.init(testing.allocator, fake.addr(), .{});
    const r = c.tryLock("k");
    fake.stop();
    try testing.expectError(error.ConnectionLost, r);
}

test "read timeout ends every call that does not wait" {
    const actions = [_]lc.Action{ .try_lock, .unlock, .reset_key, .reset_source };
    for (actions) |action| {
        // The server gives up after 10 s and closes: without a read
        // timeout the call fails with ConnectionLost instead.
        var fake: Fake = undefined;
        try fake.start(1, .hang, 0);
        const c = try lc.Client.init(testing.allocator, fake.addr(), .{ .read_timeout_ms = 50 });
        const r: lc.Error!void = switch (action) {
            .try_lock => if (c.tryLock("k")) |_| {} else |e| e,
            .unlock => c.unlock("k"),
            .reset_key => c.resetByKey("k"),
            else => c.resetBySource("s"),
        };
        fake.stop();
        testing.expectError(error.ReadTimedOut, r) catch |err| {
            std.debug.print("action {s}\n", .{@tagName(action)});
            return err;
        };
        try testing.expect(fake.peer_closed);
    }
}

test "read timeout ends the release of wait" {
    // The lock is granted at once; the unlock after it is never answered.
    var fake: Fake = undefined;
    try fake.startEach(&[_]Reply{ .answer, .hang }, lc.answer_ok, false);
    const c = try lc.Client.init(testing.allocator, fake.addr(), .{ .read_timeout_ms = 50 });
    const r = c.wait("k");
    fake.stop();
    try testing.expectError(error.ReadTimedOut, r);
    try testing.expectEqual(@as(usize, 2), fake.requests);
}

test "a lock has no read timeout" {
    var fake: Fake = undefined;
    try fake.startEach(&[_]Reply{.answer}, lc.answer_ok, true);
    const c = try lc.Client.init(testing.allocator, fake.addr(), .{ .read_timeout_ms = 10 });
    var job = LockJob{ .client = &c, .opts = .{} };
    const t = try std.Thread.spawn(.{}, LockJob.run, .{&job});
    fake.waitRequests(1);
    std.time.sleep(500 * std.time.ns_per_ms); // fifty read timeouts
    fake.open();
    t.join();
    fake.stop();
    try job.result;
}

test "refused connection is a failure" {
    var silent = try Silent.init();
    const addr = silent.addr_buf;
    const addr_len = silent.addr_len;
    try testing.expect(silent.nothingPending()); // closes the port
    const c = try lc.Client.init(testing.allocator, addr[0..addr_len], .{});
    try testing.expectError(error.ConnectionRefused, c.tryLock("k"));
    try testing.expectError(error.ConnectionRefused, c.lock("k"));
}

test "host names resolve" {
    var fake: Fake = undefined;
    try fake.start(1, .answer, lc.answer_ok);
    var buf: [32]u8 = undefined;
    const named = try std.fmt.bufPrint(&buf, "localhost:{d}", .{fake.server.listen_address.getPort()});
    const c = try lc.Client.init(testing.allocator, named, .{});
    const r = c.unlock("k");
    fake.stop();
    try r;
}

test "addresses" {
    const good = [_][]const u8{ "localhost:22119", "127.0.0.1:1", "[::1]:22119", ":22119" };
    const hosts = [_][]const u8{ "localhost", "127.0.0.1", "::1", "" };
    for (good, hosts) |a, h| {
        const c = try lc.Client.init(testing.allocator, a, .{});
        try testing.expectEqualStrings(h, c.host());
        try testing.expectEqual(lc.default_connect_timeout_ms, c.connect_timeout_ms);
        try testing.expectEqual(lc.default_read_timeout_ms, c.read_timeout_ms);
    }
    const bad = [_][]const u8{ "localhost", "localhost:", "localhost:0", "localhost:65536", "localhost:12x", "::1:22119", "[::1:22119", "localhost:+80" };
    for (bad) |a| {
        testing.expectError(error.InvalidAddress, lc.Client.init(testing.allocator, a, .{})) catch |err| {
            std.debug.print("address {s}\n", .{a});
            return err;
        };
    }
}
