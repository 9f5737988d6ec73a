//! The bytes of the session protocol (docs/protocol.md, "Mutex port, session
//! protocol (v2)"). A connection begins with the preface, then frames go both
//! ways: [length u32][type u8][id u64][fields], the length counting the bytes
//! after itself (9 to max_frame); a field is [tag u8][size u16][value].
//! Integers are big-endian. A list item (held, parked, holder) is a field
//! whose value is itself a sequence of fields.

const std = @import("std");

pub const preface = "LC/2";

/// Bounds of a frame's length field; head is what it counts before the fields.
pub const max_frame: u32 = 65536;
pub const head: u32 = 9;

/// Frame types.
pub const Type = struct {
    pub const hello: u8 = 0x01;
    pub const @"resume": u8 = 0x02;
    pub const acquire: u8 = 0x03;
    pub const release: u8 = 0x04;
    pub const renew: u8 = 0x05;
    pub const cancel: u8 = 0x06;
    pub const describe: u8 = 0x07;
    pub const ping: u8 = 0x08;
    pub const close: u8 = 0x09;
    pub const watch: u8 = 0x0A;
    pub const welcome: u8 = 0x81;
    pub const granted: u8 = 0x82;
    pub const ok: u8 = 0x83;
    pub const refused: u8 = 0x84;
    pub const lost: u8 = 0x85;
    pub const info: u8 = 0x86;
    pub const goodbye: u8 = 0x87;
    pub const event: u8 = 0x88;
    pub const more: u8 = 0x89;
};

/// Field tags.
pub const Tag = struct {
    pub const key: u8 = 0x01;
    pub const name: u8 = 0x02;
    pub const ttl_ms: u8 = 0x03;
    pub const credential: u8 = 0x04;
    pub const session: u8 = 0x05;
    pub const secret: u8 = 0x06;
    pub const token: u8 = 0x07;
    pub const wait_ms: u8 = 0x08;
    pub const lease_ms: u8 = 0x09;
    pub const delay_ms: u8 = 0x0A;
    pub const target: u8 = 0x0B;
    pub const server: u8 = 0x0C;
    pub const code: u8 = 0x0D;
    pub const message: u8 = 0x0E;
    pub const queue: u8 = 0x0F;
    pub const applied: u8 = 0x10;
    pub const left_ms: u8 = 0x11;
    pub const held_ms: u8 = 0x12;
    pub const keepalive_ms: u8 = 0x13;
    pub const request: u8 = 0x14;
    pub const mode: u8 = 0x15;
    pub const limit: u8 = 0x16;
    pub const priority: u8 = 0x17;
    pub const reentrant: u8 = 0x18;
    pub const owner: u8 = 0x19;
    pub const count: u8 = 0x1A;
    pub const leader: u8 = 0x1B;
    pub const event: u8 = 0x1C;
    pub const at_ms: u8 = 0x1D;
    pub const more: u8 = 0x1E;
    pub const note: u8 = 0x1F;
    pub const held: u8 = 0x20;
    pub const parked: u8 = 0x21;
    pub const holder: u8 = 0x22;
    pub const lapse: u8 = 0x23;
};

/// Codes: why a request was refused, a lock lost or a connection ended.
pub const Code = struct {
    pub const busy: u8 = 1;
    pub const timeout: u8 = 2;
    pub const cancelled: u8 = 3;
    pub const reset: u8 = 4;
    pub const stale_token: u8 = 5;
    pub const duplicate: u8 = 6;
    pub const bad_request: u8 = 7;
    pub const unsupported: u8 = 8;
    pub const session_ended: u8 = 9;
    pub const not_durable: u8 = 10;
    pub const lease_expired: u8 = 11;
    pub const session_expired: u8 = 12;
    pub const protocol_error: u8 = 13;
    pub const unknown_session: u8 = 14;
    pub const shutting_down: u8 = 15;
    pub const deadlock: u8 = 16;
    pub const limit_mismatch: u8 = 17;
    pub const upgrade: u8 = 18;
    pub const not_leader: u8 = 19;
    pub const slow_consumer: u8 = 20;
    pub const unauthenticated: u8 = 21;
    pub const forbidden: u8 = 22;
    pub const rate_limited: u8 = 23;
    pub const over_limit: u8 = 24;
};

pub const secret_len = 16;

/// The value size of the tags of fixed size, 0 for the others.
pub const fixed_size: [256]u8 = blk: {
    var t = [_]u8{0} ** 256;
    for ([_]u8{ Tag.ttl_ms, Tag.wait_ms, Tag.lease_ms, Tag.delay_ms, Tag.queue, Tag.left_ms, Tag.held_ms, Tag.keepalive_ms, Tag.limit, Tag.priority, Tag.count }) |tag| t[tag] = 4;
    for ([_]u8{ Tag.session, Tag.token, Tag.target, Tag.applied, Tag.request, Tag.at_ms }) |tag| t[tag] = 8;
    for ([_]u8{ Tag.code, Tag.mode, Tag.reentrant, Tag.event, Tag.more, Tag.lapse }) |tag| t[tag] = 1;
    t[Tag.secret] = secret_len;
    break :blk t;
};

/// A malformed frame: a length outside head..max_frame, a field that runs
/// past its frame, or a field of fixed size with a value of another size.
pub const ProtocolError = error{Protocol};

/// One field. A decoded field's value aliases the bytes it came from.
pub const Field = struct {
    tag: u8,
    value: []const u8,

    /// The value as an unsigned integer (its size is checked at decoding).
    pub fn uint(f: Field) u64 {
        var n: u64 = 0;
        for (f.value) |c| n = n << 8 | c;
        return n;
    }
};

/// A decoded frame; fields alias the decoder's storage.
pub const Frame = struct {
    typ: u8,
    id: u64,
    fields: []const Field,

    pub fn get(f: Frame, tag: u8) ?[]const u8 {
        for (f.fields) |fl| if (fl.tag == tag) return fl.value;
        return null;
    }

    pub fn uint(f: Frame, tag: u8) ?u64 {
        for (f.fields) |fl| if (fl.tag == tag) return fl.uint();
        return null;
    }

    /// Whether the answer goes on in a MORE frame.
    pub fn more(f: Frame) bool {
        return (f.uint(Tag.more) orelse 0) != 0;
    }
};

/// Builds frames into a byte list. Callers keep values within their limits.
pub const Encoder = struct {
    out: *std.ArrayList(u8),
    start: usize,

    /// Starts a frame of typ and id at the end of out.
    pub fn begin(out: *std.ArrayList(u8), typ: u8, id: u64) !Encoder {
        const start = out.items.len;
        try out.appendSlice(&[_]u8{ 0, 0, 0, 0, typ });
        try out.writer().writeInt(u64, id, .big);
        return .{ .out = out, .start = start };
    }

    pub fn bytes(e: Encoder, tag: u8, v: []const u8) !void {
        try e.out.append(tag);
        try e.out.writer().writeInt(u16, @intCast(v.len), .big);
        try e.out.appendSlice(v);
    }

    pub fn int(e: Encoder, tag: u8, comptime T: type, v: T) !void {
        var b: [@sizeOf(T)]u8 = undefined;
        std.mem.writeInt(T, &b, v, .big);
        try e.bytes(tag, &b);
    }

    /// Writes the length; the frame is then whole.
    pub fn finish(e: Encoder) void {
        const n: u32 = @intCast(e.out.items.len - e.start - 4);
        std.mem.writeInt(u32, e.out.items[e.start..][0..4], n, .big);
    }
};

/// The length of the whole frame at the start of b, or null while b holds
/// less than all of it. The length field, once in, is checked first.
pub fn frameLen(b: []const u8) ProtocolError!?usize {
    if (b.len < 4) return null;
    const n = std.mem.readInt(u32, b[0..4], .big);
    if (n < head or n > max_frame) return error.Protocol;
    if (b.len < 4 + n) return null;
    return 4 + n;
}

/// Decodes the whole frame b (as frameLen measured it); its fields go to
/// fields (cleared first) and alias b.
pub fn decode(b: []const u8, fields: *std.ArrayList(Field)) !Frame {
    const n = (try frameLen(b)) orelse return error.Protocol;
    if (n != b.len) return error.Protocol;
    fields.clearRetainingCapacity();
    try parseFields(b[13..], fields);
    return .{ .typ = b[4], .id = std.mem.readInt(u64, b[5..13], .big), .fields = fields.items };
}

/// Decodes a sequence of fields (a frame's, or a list item's) and appends
/// them to out.
pub fn parseFields(b: []const u8, out: *std.ArrayList(Field)) !void {
    var rest = b;
    while (rest.len > 0) {
        if (rest.len < 3) return error.Protocol;
        const tag = rest[0];
        const size = std.mem.readInt(u16, rest[1..3], .big);
        if (size > rest.len - 3) return error.Protocol;
        const want = fixed_size[tag];
        if (want != 0 and size != want) return error.Protocol;
        try out.append(.{ .tag = tag, .value = rest[3 .. 3 + size] });
        rest = rest[3 + size ..];
    }
}

/// One list item, decoded into a small fixed table (an item has at most a
/// dozen fields; more is a protocol error of the server).
pub const Item = struct {
    fields: [16]Field = undefined,
    len: usize = 0,

    pub fn parse(b: []const u8) ProtocolError!Item {
        var it = Item{};
        var rest = b;
        while (rest.len > 0) {
            if (rest.len < 3 or it.len == it.fields.len) return error.Protocol;
            const tag = rest[0];
            const size = std.mem.readInt(u16, rest[1..3], .big);
            if (size > rest.len - 3) return error.Protocol;
            const want = fixed_size[tag];
            if (want != 0 and size != want) return error.Protocol;
            it.fields[it.len] = .{ .tag = tag, .value = rest[3 .. 3 + size] };
            it.len += 1;
            rest = rest[3 + size ..];
        }
        return it;
    }

    pub fn frame(it: *const Item) Frame {
        return .{ .typ = 0, .id = 0, .fields = it.fields[0..it.len] };
    }
};

/// Reads frames from a byte source into one buffer. A frame it returns
/// aliases its storage until the next call. source has
/// `fn read(ctx, buf: []u8) !usize` (0 at the end of the stream).
pub fn Reader(comptime Source: type) type {
    return struct {
        const Self = @This();
        source: Source,
        buf: std.ArrayList(u8),
        off: usize = 0,
        fields: std.ArrayList(Field),
        // An answer in several frames (Long answers): its fields, and the
        // bytes they alias, owned until the next call.
        joined: std.ArrayList(Field),
        arena: std.heap.ArenaAllocator,

        pub fn init(allocator: std.mem.Allocator, source: Source) Self {
            return .{
                .source = source,
                .buf = std.ArrayList(u8).init(allocator),
                .fields = std.ArrayList(Field).init(allocator),
                .joined = std.ArrayList(Field).init(allocator),
                .arena = std.heap.ArenaAllocator.init(allocator),
            };
        }

        pub fn deinit(r: *Self) void {
            r.buf.deinit();
            r.fields.deinit();
            r.joined.deinit();
            r.arena.deinit();
        }

        /// Bytes read and not yet taken as frames.
        pub fn pending(r: *const Self) []const u8 {
            return r.buf.items[r.off..];
        }

        /// Whether the next frame is whole in the buffer already (or its
        /// length is wrong, which the next call reports).
        pub fn hasFrame(r: *const Self) bool {
            return (frameLen(r.pending()) catch return true) != null;
        }

        /// The next frame, reading as much as it needs. Errors:
        /// error.Protocol, error.EndOfStream, or the source's.
        pub fn next(r: *Self) !Frame {
            while (true) {
                const rest = r.buf.items[r.off..];
                if (try frameLen(rest)) |n| {
                    const f = try decode(rest[0..n], &r.fields);
                    r.off += n;
                    return f;
                }
                // Move what is left to the front, then read more.
                std.mem.copyForwards(u8, r.buf.items[0..rest.len], rest);
                r.buf.shrinkRetainingCapacity(rest.len);
                r.off = 0;
                var need: usize = 4096;
                if (rest.len >= 4) need = @max(need, 4 + @as(usize, std.mem.readInt(u32, rest[0..4], .big)));
                try r.buf.ensureTotalCapacity(need);
                const got = try r.source.read(r.buf.allocatedSlice()[rest.len..]);
                if (got == 0) return error.EndOfStream;
                r.buf.items.len += got;
            }
        }

        /// The next answer whole: the next frame, or, when it says more,
        /// that frame with the fields of the MORE frames that follow it
        /// joined to its own, without the field more. A GOODBYE inside an
        /// answer is returned in its place. A MORE that continues no
        /// answer, or another frame inside one, is error.Protocol.
        pub fn answer(r: *Self) !Frame {
            _ = r.arena.reset(.retain_capacity);
            var f = try r.next();
            if (f.typ == Type.more) return error.Protocol;
            if (!f.more()) return f;
            r.joined.clearRetainingCapacity();
            const a = r.arena.allocator();
            const typ = f.typ;
            const id = f.id;
            while (true) {
                const more = f.more();
                for (f.fields) |fl| {
                    if (fl.tag == Tag.more) continue;
                    try r.joined.append(.{ .tag = fl.tag, .value = try a.dupe(u8, fl.value) });
                }
                if (!more) return .{ .typ = typ, .id = id, .fields = r.joined.items };
                f = try r.next();
                if (f.typ == Type.goodbye) return f;
                if (f.typ != Type.more or f.id != id) return error.Protocol;
            }
        }
    };
}
