//! The session client in brief: zig build session-example -- host:port
const std = @import("std");
const lockingcenter = @import("lockingcenter");

pub fn main() !void {
    var gpa = std.heap.GeneralPurposeAllocator(.{}){};
    defer _ = gpa.deinit();
    const allocator = gpa.allocator();
    const args = try std.process.argsAlloc(allocator);
    defer std.process.argsFree(allocator, args);
    const address = if (args.len > 1) args[1] else "localhost:22119";

    const session = try lockingcenter.Session.connect(allocator, address, .{ .name = "example-worker" });
    defer session.close();

    var lock = try session.acquire("zig/example/orders", .{ .lease_ms = 30_000 });
    defer lock.release();
    std.debug.print("holding with fencing token {d}\n", .{lock.token()});

    // A try: null means another holder has the key (busy, not an error).
    if (try session.tryAcquire("zig/example/report", .{})) |held| {
        var report = held;
        defer report.release();
    }

    // A bounded wait, enforced by the server; the server's words on refusal.
    var diag: lockingcenter.Diagnostics = .{};
    var other = session.acquire("zig/example/nightly", .{ .wait_ms = 2000, .diagnostics = &diag }) catch |err| switch (err) {
        error.Timeout => return std.debug.print("still held after 2 s: {s}\n", .{diag.message()}),
        else => return err,
    };
    defer other.release();
    if (other.lost()) |why| std.debug.print("lost: {s}\n", .{why.text()});
}
