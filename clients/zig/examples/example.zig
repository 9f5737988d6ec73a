//! Takes a lock, does the work, releases it.
//!
//!     zig build example -- localhost:22119

const std = @import("std");
const lockingcenter = @import("lockingcenter");

pub fn main() !void {
    var gpa = std.heap.GeneralPurposeAllocator(.{}){};
    defer _ = gpa.deinit();
    const allocator = gpa.allocator();

    const args = try std.process.argsAlloc(allocator);
    defer std.process.argsFree(allocator, args);
    const address = if (args.len > 1) args[1] else "localhost:22119";
    const key = "orders/batch-7";
    const out = std.io.getStdOut().writer();

    const client = try lockingcenter.Client.init(allocator, address, .{ .source = "example-worker" });

    try client.lock(key); // blocks until the key is ours
    try out.print("holding {s}\n", .{key});
    // ... exclusive work ...
    try client.unlock(key);

    // tryLock never queues: false means busy, which is not an error.
    if (try client.tryLock(key)) {
        try out.print("trylock {s}: acquired\n", .{key});
        try client.unlock(key);
    } else {
        try out.print("trylock {s}: busy\n", .{key});
    }

    // Give up after two seconds; the server then withdraws the request.
    client.lockWith(key, .{ .timeout_ms = 2000 }) catch |err| switch (err) {
        error.DeadlinePassed => {
            try out.print("gave up waiting for {s}\n", .{key});
            return;
        },
        else => return err,
    };
    try client.unlock(key);
}
