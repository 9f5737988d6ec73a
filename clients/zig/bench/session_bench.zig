//! Acquire+release cycles per second through one shared session: N threads
//! sharing one Session, each on its own key, against the lcd at ADDRESS.
//!
//!     session-bench ADDRESS [WORKERS [SECONDS]]
//!
//! Prints the cycles per second and the process's CPU time (user and
//! system) per cycle in microseconds (bench/session-bench.sh runs it in
//! rounds beside the Go client).

const std = @import("std");
const lc = @import("lockingcenter");

var stop = std.atomic.Value(bool).init(false);

fn work(session: *lc.Session, i: usize, count: *u64) void {
    var buf: [32]u8 = undefined;
    const key = std.fmt.bufPrint(&buf, "zig/bench/t{d}", .{i}) catch unreachable;
    var n: u64 = 0;
    while (!stop.load(.acquire)) {
        var lock = session.acquire(key, .{}) catch |e| std.debug.panic("acquire: {s}", .{@errorName(e)});
        lock.releaseChecked() catch |e| std.debug.panic("release: {s}", .{@errorName(e)});
        n += 1;
    }
    count.* = n;
}

pub fn main() !void {
    const allocator = std.heap.c_allocator;
    const args = try std.process.argsAlloc(allocator);
    defer std.process.argsFree(allocator, args);
    if (args.len < 2) return error.Usage;
    const workers = if (args.len > 2) try std.fmt.parseInt(usize, args[2], 10) else 16;
    const seconds = if (args.len > 3) try std.fmt.parseFloat(f64, args[3]) else 5;

    const session = try lc.Session.connect(allocator, args[1], .{ .name = "bench-zig" });
    defer session.close();
    const counts = try allocator.alloc(u64, workers);
    defer allocator.free(counts);
    const threads = try allocator.alloc(std.Thread, workers);
    defer allocator.free(threads);
    const cpu0 = cpuNs();
    var timer = try std.time.Timer.start();
    for (threads, 0..) |*t, i| t.* = try std.Thread.spawn(.{}, work, .{ session, i, &counts[i] });
    std.time.sleep(@intFromFloat(seconds * std.time.ns_per_s));
    stop.store(true, .release);
    for (threads) |t| t.join();
    const elapsed = @as(f64, @floatFromInt(timer.read())) / std.time.ns_per_s;
    var total: u64 = 0;
    for (counts) |c| total += c;
    const cycles: f64 = @floatFromInt(total);
    const cpu_us = @as(f64, @floatFromInt(cpuNs() - cpu0)) / std.time.ns_per_us;
    try std.io.getStdOut().writer().print("{d:.0} {d:.1}\n", .{ cycles / elapsed, cpu_us / cycles });
}

fn cpuNs() u64 {
    const u = std.posix.getrusage(std.posix.rusage.SELF);
    const us = (u.utime.sec + u.stime.sec) * std.time.us_per_s + u.utime.usec + u.stime.usec;
    return @as(u64, @intCast(us)) * std.time.ns_per_us;
}
