//! Unit tests of the session client's codec: every frame of
//! clients/testdata/session-vectors.json encoded and decoded byte for byte,
//! read back split at every point, long answers joined; random and mutated
//! bytes give error.Protocol (or an incomplete frame), never anything else.

const std = @import("std");
const lc = @import("lockingcenter");
const build_options = @import("build_options");
const wire = lc.frame;

const testing = std.testing;
const Value = std.json.Value;

fn loadVectors(allocator: std.mem.Allocator) !std.json.Parsed(Value) {
    const path = std.process.getEnvVarOwned(allocator, "LC_SESSION_VECTORS") catch
        try allocator.dupe(u8, build_options.session_vectors_path);
    defer allocator.free(path);
    const content = try std.fs.cwd().readFileAlloc(allocator, path, 1 << 22);
    defer allocator.free(content);
    return std.json.parseFromSlice(Value, allocator, content, .{});
}

fn hex(allocator: std.mem.Allocator, s: []const u8) ![]u8 {
    const out = try allocator.alloc(u8, s.len / 2);
    _ = try std.fmt.hexToBytes(out, s);
    return out;
}

fn frames(root: Value) []const Value {
    return root.object.get("frames").?.array.items;
}

/// A byte source that hands out its bytes in pieces of at most step.
const Pieces = struct {
    bytes: []const u8,
    step: usize,
    at: *usize,

    pub fn read(p: Pieces, buf: []u8) !usize {
        const n = @min(@min(p.step, buf.len), p.bytes.len - p.at.*);
        @memcpy(buf[0..n], p.bytes[p.at.*..][0..n]);
        p.at.* += n;
        return n;
    }
};

test "every vector frame encodes to its bytes" {
    const a = testing.allocator;
    const parsed = try loadVectors(a);
    defer parsed.deinit();
    try testing.expect(frames(parsed.value).len > 30);
    for (frames(parsed.value)) |v| {
        var out = std.ArrayList(u8).init(a);
        defer out.deinit();
        const e = try wire.Encoder.begin(&out, @intCast(v.object.get("type").?.integer), @intCast(v.object.get("id").?.integer));
        for (v.object.get("fields").?.array.items) |f| {
            const value = try hex(a, f.object.get("value_hex").?.string);
            defer a.free(value);
            try e.bytes(@intCast(f.object.get("tag").?.integer), value);
        }
        e.finish();
        const want = try hex(a, v.object.get("frame_hex").?.string);
        defer a.free(want);
        testing.expectEqualSlices(u8, want, out.items) catch |err| {
            std.debug.print("frame {s}\n", .{v.object.get("name").?.string});
            return err;
        };
    }
}

test "every vector frame decodes to its fields, whole and split at every point" {
    const a = testing.allocator;
    const parsed = try loadVectors(a);
    defer parsed.deinit();
    for (frames(parsed.value)) |v| {
        const bytes = try hex(a, v.object.get("frame_hex").?.string);
        defer a.free(bytes);
        const want = v.object.get("fields").?.array.items;
        for (1..bytes.len + 1) |step| {
            var at: usize = 0;
            var r = wire.Reader(Pieces).init(a, .{ .bytes = bytes, .step = step, .at = &at });
            defer r.deinit();
            const f = try r.next();
            try testing.expectEqual(@as(u8, @intCast(v.object.get("type").?.integer)), f.typ);
            try testing.expectEqual(@as(u64, @intCast(v.object.get("id").?.integer)), f.id);
            try testing.expectEqual(want.len, f.fields.len);
            for (want, f.fields) |w, got| {
                try testing.expectEqual(@as(u8, @intCast(w.object.get("tag").?.integer)), got.tag);
                const value = try hex(a, w.object.get("value_hex").?.string);
                defer a.free(value);
                try testing.expectEqualSlices(u8, value, got.value);
                if (got.tag == wire.Tag.held or got.tag == wire.Tag.parked or got.tag == wire.Tag.holder) {
                    const item = try wire.Item.parse(got.value);
                    try testing.expect(item.frame().get(wire.Tag.key) != null or got.tag == wire.Tag.holder);
                }
            }
            try testing.expectError(error.EndOfStream, r.next());
        }
    }
}

test "the vector file's codes and tags are this client's" {
    const a = testing.allocator;
    const parsed = try loadVectors(a);
    defer parsed.deinit();
    const tags = parsed.value.object.get("tags").?.object;
    try testing.expectEqual(@as(i64, wire.Tag.key), tags.get("key").?.integer);
    try testing.expectEqual(@as(i64, wire.Tag.note), tags.get("note").?.integer);
    try testing.expectEqual(@as(i64, wire.Tag.holder), tags.get("holder").?.integer);
    var it = tags.iterator();
    while (it.next()) |e| {
        inline for (@typeInfo(wire.Tag).@"struct".decls) |d| {
            if (std.mem.eql(u8, d.name, e.key_ptr.*)) try testing.expectEqual(@as(i64, @field(wire.Tag, d.name)), e.value_ptr.integer);
        }
    }
    var cit = parsed.value.object.get("codes").?.object.iterator();
    var known: usize = 0;
    while (cit.next()) |e| {
        inline for (@typeInfo(wire.Code).@"struct".decls) |d| {
            if (std.mem.eql(u8, d.name, e.key_ptr.*)) {
                try testing.expectEqual(@as(i64, @field(wire.Code, d.name)), e.value_ptr.integer);
                known += 1;
            }
        }
    }
    try testing.expectEqual(parsed.value.object.get("codes").?.object.count(), known);
    var tit = parsed.value.object.get("types").?.object.iterator();
    while (tit.next()) |e| {
        inline for (@typeInfo(wire.Type).@"struct".decls) |d| {
            if (std.mem.eql(u8, d.name, e.key_ptr.*)) try testing.expectEqual(@as(i64, @field(wire.Type, d.name)), e.value_ptr.integer);
        }
    }
}

/// The vectors named, concatenated.
fn concat(a: std.mem.Allocator, root: Value, names: []const []const u8) ![]u8 {
    var out = std.ArrayList(u8).init(a);
    for (names) |n| {
        for (frames(root)) |v| {
            if (!std.mem.eql(u8, v.object.get("name").?.string, n)) continue;
            const b = try hex(a, v.object.get("frame_hex").?.string);
            defer a.free(b);
            try out.appendSlice(b);
            break;
        } else return error.TestUnexpectedResult;
    }
    return out.toOwnedSlice();
}

test "a long answer is joined from its MORE frames" {
    const a = testing.allocator;
    const parsed = try loadVectors(a);
    defer parsed.deinit();
    const bytes = try concat(a, parsed.value, &.{
        "welcome of a resume, the first of three frames",
        "more of a welcome, another to come",
        "more of a welcome, the last",
        "info, the first of two frames",
        "more of an info, the last",
    });
    defer a.free(bytes);
    var at: usize = 0;
    var r = wire.Reader(Pieces).init(a, .{ .bytes = bytes, .step = 7, .at = &at });
    defer r.deinit();
    const w = try r.answer();
    try testing.expectEqual(wire.Type.welcome, w.typ);
    var held: usize = 0;
    var parked: usize = 0;
    for (w.fields) |f| {
        try testing.expect(f.tag != wire.Tag.more);
        if (f.tag == wire.Tag.held) held += 1;
        if (f.tag == wire.Tag.parked) parked += 1;
    }
    try testing.expectEqual(@as(usize, 2), held);
    try testing.expect(parked >= 2);
    const info = try r.answer();
    try testing.expectEqual(wire.Type.info, info.typ);
    var holders: usize = 0;
    for (info.fields) |f| if (f.tag == wire.Tag.holder) {
        holders += 1;
    };
    try testing.expect(holders >= 2);
}

test "a MORE that continues no answer, or another frame inside one, is a protocol error" {
    const a = testing.allocator;
    const parsed = try loadVectors(a);
    defer parsed.deinit();
    const cases = [_][]const []const u8{
        &.{"more of a welcome, the last"},
        &.{ "welcome of a resume, the first of three frames", "granted" },
        &.{ "info, the first of two frames", "more of a welcome, another to come", "more of a welcome, the last" },
    };
    for (cases) |names| {
        const bytes = try concat(a, parsed.value, names);
        defer a.free(bytes);
        var at: usize = 0;
        var r = wire.Reader(Pieces).init(a, .{ .bytes = bytes, .step = bytes.len, .at = &at });
        defer r.deinit();
        var got: anyerror!void = {};
        while (true) {
            _ = r.answer() catch |e| {
                got = e;
                break;
            };
        }
        try testing.expectError(error.Protocol, got);
    }
}

/// Reads everything of bytes as frames and their list items; only the
/// protocol error, or the end of the bytes, may stop it.
fn readAll(a: std.mem.Allocator, bytes: []const u8) !void {
    var at: usize = 0;
    var r = wire.Reader(Pieces).init(a, .{ .bytes = bytes, .step = 1 + bytes.len % 5, .at = &at });
    defer r.deinit();
    while (true) {
        const f = r.answer() catch |e| switch (e) {
            error.Protocol, error.EndOfStream => return,
            else => return e,
        };
        for (f.fields) |fl| {
            _ = fl.uint();
            if (fl.tag == wire.Tag.held or fl.tag == wire.Tag.parked or fl.tag == wire.Tag.holder) {
                _ = wire.Item.parse(fl.value) catch |e| switch (e) {
                    error.Protocol => {},
                };
            }
        }
    }
}

test "random and mutated frames give only the protocol error" {
    const a = testing.allocator;
    const parsed = try loadVectors(a);
    defer parsed.deinit();
    var prng = std.Random.DefaultPrng.init(0x5e55_10);
    const rand = prng.random();
    for (frames(parsed.value)) |v| {
        const bytes = try hex(a, v.object.get("frame_hex").?.string);
        defer a.free(bytes);
        // Every byte flipped, every cut.
        for (0..bytes.len) |i| {
            const m = try a.dupe(u8, bytes);
            defer a.free(m);
            m[i] ^= @as(u8, 1) << @intCast(rand.uintLessThan(u8, 8));
            try readAll(a, m);
            m[i] = rand.int(u8);
            try readAll(a, m);
            try readAll(a, bytes[0..i]);
        }
    }
    var buf: [512]u8 = undefined;
    for (0..20_000) |_| {
        const n = rand.uintLessThan(usize, buf.len);
        rand.bytes(buf[0..n]);
        // A plausible length now and then, so that fields get parsed.
        if (n >= 4 and rand.boolean()) std.mem.writeInt(u32, buf[0..4], @intCast(rand.uintLessThan(usize, n)), .big);
        try readAll(a, buf[0..n]);
        _ = wire.Item.parse(buf[0..n]) catch {};
    }
}

// ---- a scripted server ---------------------------------------------------------

/// One connection of a scripted server: frames in, frames out.
const Peer = struct {
    stream: std.net.Stream,
    reader: wire.Reader(Peer.Source),
    out: std.ArrayList(u8),

    const Source = struct {
        stream: std.net.Stream,
        pub fn read(src: Source, buf: []u8) !usize {
            return src.stream.read(buf);
        }
    };

    fn init(a: std.mem.Allocator, stream: std.net.Stream) Peer {
        return .{ .stream = stream, .reader = wire.Reader(Source).init(a, .{ .stream = stream }), .out = std.ArrayList(u8).init(a) };
    }

    fn deinit(p: *Peer) void {
        p.reader.deinit();
        p.out.deinit();
        p.stream.close();
    }

    /// The next frame of the client, PINGs answered on the way.
    fn next(p: *Peer) !wire.Frame {
        while (true) {
            const f = try p.reader.next();
            if (f.typ != wire.Type.ping) return f;
            try p.send(wire.Type.ok, f.id, &.{});
        }
    }

    const Out = struct { tag: u8, value: []const u8 };

    fn send(p: *Peer, typ: u8, id: u64, fields: []const Out) !void {
        p.out.clearRetainingCapacity();
        const e = try wire.Encoder.begin(&p.out, typ, id);
        for (fields) |f| try e.bytes(f.tag, f.value);
        e.finish();
        try p.stream.writeAll(p.out.items);
    }
};

fn be(comptime T: type, v: T) [@sizeOf(T)]u8 {
    var b: [@sizeOf(T)]u8 = undefined;
    std.mem.writeInt(T, &b, v, .big);
    return b;
}

/// A scripted server on 127.0.0.1: the script's run(server) on a thread of
/// its own.
fn Scripted(comptime Script: type) type {
    return struct {
        const Self = @This();
        script: Script = .{},
        server: std.net.Server,
        failed: ?[]const u8 = null,
        thread: std.Thread = undefined,
        addr_buf: [32]u8 = undefined,
        addr: []const u8 = "",

        fn start(self: *Self) !void {
            const loopback = try std.net.Address.parseIp("127.0.0.1", 0);
            self.* = .{ .server = try loopback.listen(.{}) };
            self.addr = try std.fmt.bufPrint(&self.addr_buf, "127.0.0.1:{d}", .{self.server.listen_address.getPort()});
            self.thread = try std.Thread.spawn(.{}, run, .{self});
        }

        fn run(self: *Self) void {
            self.script.run(&self.server) catch |e| {
                self.failed = @errorName(e);
            };
        }

        /// Joins the script; fails when it did.
        fn finish(self: *Self) !void {
            self.thread.join();
            self.server.deinit();
            if (self.failed) |f| {
                std.debug.print("script: {s}\n", .{f});
                return error.TestUnexpectedResult;
            }
        }
    };
}

/// The script of the lease test: what the client sent, checked frame by frame.
const LeaseScript = struct {
    lapse_release: bool = false,
    plain_release: bool = false,

    fn run(sc: *LeaseScript, server: *std.net.Server) !void {
        const conn = try server.accept();
        var p = Peer.init(testing.allocator, conn.stream);
        defer p.deinit();
        var preface: [4]u8 = undefined;
        _ = try conn.stream.readAll(&preface);
        if (!std.mem.eql(u8, &preface, wire.preface)) return error.NoPreface;
        const hello = try p.next();
        if (hello.typ != wire.Type.hello) return error.NoHello;
        try p.send(wire.Type.welcome, hello.id, &.{
            .{ .tag = wire.Tag.session, .value = &be(u64, 42) },
            .{ .tag = wire.Tag.secret, .value = &([_]u8{0xA5} ** 16) },
            .{ .tag = wire.Tag.ttl_ms, .value = &be(u32, 60_000) },
            .{ .tag = wire.Tag.keepalive_ms, .value = &be(u32, 20_000) },
            .{ .tag = wire.Tag.server, .value = "script" },
        });
        // A lease of 60 ms: the client gives it up at its own deadline.
        const leased = try p.next();
        if (leased.typ != wire.Type.acquire) return error.NoAcquire;
        try p.send(wire.Type.granted, leased.id, &.{
            .{ .tag = wire.Tag.key, .value = "k" },
            .{ .tag = wire.Tag.token, .value = &be(u64, 7) },
            .{ .tag = wire.Tag.count, .value = &be(u32, 1) },
            .{ .tag = wire.Tag.left_ms, .value = &be(u32, 60) },
        });
        const gave_up = try p.next();
        if (gave_up.typ != wire.Type.release or gave_up.uint(wire.Tag.token) != 7) return error.NoRelease;
        sc.lapse_release = gave_up.uint(wire.Tag.lapse) == 1;
        try p.send(wire.Type.ok, gave_up.id, &.{});
        // No lease: the user's release has no lapse.
        const plain = try p.next();
        if (plain.typ != wire.Type.acquire) return error.NoAcquire;
        try p.send(wire.Type.granted, plain.id, &.{
            .{ .tag = wire.Tag.key, .value = "k" },
            .{ .tag = wire.Tag.token, .value = &be(u64, 8) },
            .{ .tag = wire.Tag.count, .value = &be(u32, 1) },
        });
        const released = try p.next();
        if (released.typ != wire.Type.release or released.uint(wire.Tag.token) != 8) return error.NoRelease;
        sc.plain_release = released.get(wire.Tag.lapse) == null;
        try p.send(wire.Type.ok, released.id, &.{});
        const close = try p.next();
        if (close.typ != wire.Type.close) return error.NoClose;
        try p.send(wire.Type.ok, close.id, &.{});
    }
};

test "a lease given up at the client's deadline is released with lapse; a user's release has none" {
    var sc: Scripted(LeaseScript) = undefined;
    try sc.start();
    {
        const s = try lc.Session.connect(testing.allocator, sc.addr, .{ .name = "test" });
        defer s.close();
        var leased = try s.acquire("k", .{ .lease_ms = 60 });
        defer leased.release();
        try testing.expectEqual(@as(u64, 7), leased.token());
        try testing.expectEqual(lc.LostReason.lease_expired, leased.waitLost(10_000).?);
        var plain = try s.acquire("k", .{});
        try testing.expectEqual(@as(?lc.LostReason, null), plain.lost());
        try plain.releaseChecked();
        try plain.releaseChecked(); // again: nothing
    }
    try sc.finish();
    try testing.expect(sc.script.lapse_release);
    try testing.expect(sc.script.plain_release);
}

/// The script of the resume test: a drop with a lock held, an acquire
/// parked and an acquire granted whose GRANTED never came.
const ResumeScript = struct {
    resumed: bool = false,

    fn welcome(p: *Peer, id: u64, more: []const Peer.Out) !void {
        var fields = std.ArrayList(Peer.Out).init(testing.allocator);
        defer fields.deinit();
        try fields.appendSlice(&.{
            .{ .tag = wire.Tag.session, .value = &be(u64, 42) },
            .{ .tag = wire.Tag.secret, .value = &([_]u8{0xA5} ** 16) },
            .{ .tag = wire.Tag.ttl_ms, .value = &be(u32, 60_000) },
            .{ .tag = wire.Tag.keepalive_ms, .value = &be(u32, 20_000) },
            .{ .tag = wire.Tag.server, .value = "script" },
        });
        try fields.appendSlice(more);
        try p.send(wire.Type.welcome, id, fields.items);
    }

    fn item(buf: *std.ArrayList(u8), fields: []const Peer.Out) ![]const u8 {
        const start = buf.items.len;
        for (fields) |f| {
            try buf.append(f.tag);
            try buf.writer().writeInt(u16, @intCast(f.value.len), .big);
            try buf.appendSlice(f.value);
        }
        return buf.items[start..];
    }

    fn run(sc: *ResumeScript, server: *std.net.Server) !void {
        var ids: [4]u64 = undefined; // by the key's last letter: a, b, c
        {
            const conn = try server.accept();
            var p = Peer.init(testing.allocator, conn.stream);
            defer p.deinit();
            var preface: [4]u8 = undefined;
            _ = try conn.stream.readAll(&preface);
            const hello = try p.next();
            try welcome(&p, hello.id, &.{});
            for (0..3) |_| {
                const f = try p.next();
                if (f.typ != wire.Type.acquire) return error.NoAcquire;
                const k = f.get(wire.Tag.key) orelse return error.NoKey;
                ids[k[0] - 'a'] = f.id;
                if (k[0] == 'a') try p.send(wire.Type.granted, f.id, &.{
                    .{ .tag = wire.Tag.key, .value = "a" },
                    .{ .tag = wire.Tag.token, .value = &be(u64, 7) },
                    .{ .tag = wire.Tag.count, .value = &be(u32, 1) },
                });
            }
        } // the connection drops
        const conn = try server.accept();
        var p = Peer.init(testing.allocator, conn.stream);
        defer p.deinit();
        var preface: [4]u8 = undefined;
        _ = try conn.stream.readAll(&preface);
        const rs = try p.reader.next();
        if (rs.typ != wire.Type.@"resume" or rs.uint(wire.Tag.session) != 42) return error.NoResume;
        sc.resumed = true;
        const sync = try p.reader.next();
        if (sync.typ != wire.Type.ping) return error.NoPing;
        const sync_id = sync.id;
        var items = std.ArrayList(u8).init(testing.allocator);
        defer items.deinit();
        try items.ensureTotalCapacity(512); // the items below alias it
        const held_a = try item(&items, &.{
            .{ .tag = wire.Tag.key, .value = "a" },                  .{ .tag = wire.Tag.token, .value = &be(u64, 7) },
            .{ .tag = wire.Tag.request, .value = &be(u64, ids[0]) }, .{ .tag = wire.Tag.mode, .value = &be(u8, 0) },
            .{ .tag = wire.Tag.count, .value = &be(u32, 1) },
        });
        const held_c = try item(&items, &.{
            .{ .tag = wire.Tag.key, .value = "c" },                  .{ .tag = wire.Tag.token, .value = &be(u64, 9) },
            .{ .tag = wire.Tag.request, .value = &be(u64, ids[2]) }, .{ .tag = wire.Tag.mode, .value = &be(u8, 0) },
            .{ .tag = wire.Tag.count, .value = &be(u32, 1) },
        });
        const parked_b = try item(&items, &.{
            .{ .tag = wire.Tag.key, .value = "b" }, .{ .tag = wire.Tag.request, .value = &be(u64, ids[1]) },
        });
        try welcome(&p, rs.id, &.{
            .{ .tag = wire.Tag.applied, .value = &be(u64, @max(ids[1], ids[2])) },
            .{ .tag = wire.Tag.held, .value = held_a },
            .{ .tag = wire.Tag.held, .value = held_c },
            .{ .tag = wire.Tag.parked, .value = parked_b },
        });
        try p.send(wire.Type.ok, sync_id, &.{});
        // The parked acquire's grant comes after the resume.
        try p.send(wire.Type.granted, ids[1], &.{
            .{ .tag = wire.Tag.key, .value = "b" },
            .{ .tag = wire.Tag.token, .value = &be(u64, 8) },
            .{ .tag = wire.Tag.count, .value = &be(u32, 1) },
        });
        // Three releases, then the close.
        while (true) {
            const f = try p.next();
            if (f.typ == wire.Type.close) return p.send(wire.Type.ok, f.id, &.{});
            if (f.typ != wire.Type.release) return error.NotRelease;
            try p.send(wire.Type.ok, f.id, &.{});
        }
    }
};

fn acquireOn(s: *lc.Session, key: []const u8, out: *lc.SessionError!lc.Lock) void {
    out.* = s.acquire(key, .{});
}

test "a resume keeps a held lock, grants an acquire whose answer was lost and one parked" {
    var sc: Scripted(ResumeScript) = undefined;
    try sc.start();
    {
        const s = try lc.Session.connect(testing.allocator, sc.addr, .{ .name = "test" });
        defer s.close();
        var a = try s.acquire("a", .{});
        defer a.release();
        var b: lc.SessionError!lc.Lock = error.Protocol;
        var c: lc.SessionError!lc.Lock = error.Protocol;
        const tb = try std.Thread.spawn(.{}, acquireOn, .{ s, "b", &b });
        const tc = try std.Thread.spawn(.{}, acquireOn, .{ s, "c", &c });
        tb.join();
        tc.join();
        var lb = try b;
        defer lb.release();
        var lcc = try c;
        defer lcc.release();
        try testing.expectEqual(@as(u64, 8), lb.token());
        try testing.expectEqual(@as(u64, 9), lcc.token());
        try testing.expectEqual(@as(u64, 7), a.token());
        try testing.expectEqual(@as(?lc.LostReason, null), a.lost());
    }
    try sc.finish();
    try testing.expect(sc.script.resumed);
}
