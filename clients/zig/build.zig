const std = @import("std");

pub fn build(b: *std.Build) void {
    const target = b.standardTargetOptions(.{});
    const optimize = b.standardOptimizeOption(.{});

    // The client, for dependents: b.dependency("lockingcenter", ...).module("lockingcenter").
    const lockingcenter = b.addModule("lockingcenter", .{
        .root_source_file = b.path("src/lockingcenter.zig"),
        .target = target,
        .optimize = optimize,
    });

    // zig build test: unit tests, the protocol vectors included.
    const options = b.addOptions();
    options.addOption([]const u8, "vectors_path", b.pathFromRoot("../testdata/vectors.json"));
    addTests(b, "test", "src/tests.zig", lockingcenter, options, target, optimize);

    // zig build session-test: the session client's unit tests (the session
    // vectors, the fuzzed decoder, a scripted server).
    options.addOption([]const u8, "session_vectors_path", b.pathFromRoot("../testdata/session-vectors.json"));
    addTests(b, "session-test", "src/session_tests.zig", lockingcenter, options, target, optimize);

    // zig build example -- host:port
    const example = addProgram(b, "example", "examples/example.zig", lockingcenter, target, optimize);
    b.step("example", "Run the example").dependOn(&example.step);

    // zig build session-example -- host:port
    const session_example = addProgram(b, "session-example", "examples/session.zig", lockingcenter, target, optimize);
    b.step("session-example", "Run the session example").dependOn(&session_example.step);

    // zig build scenario: the live conformance scenario (needs LC_* in the environment).
    const scenario = addProgram(b, "scenario", "scenario/scenario.zig", lockingcenter, target, optimize);
    b.step("scenario", "Run the live conformance scenario").dependOn(&scenario.step);

    // zig build session-bench -- host:port [workers [seconds]] (bench/session-bench.sh)
    const bench = addProgram(b, "session-bench", "bench/session_bench.zig", lockingcenter, target, optimize);
    bench.producer.?.linkLibC(); // malloc, as a program would allocate
    b.step("session-bench", "Run the session benchmark").dependOn(&bench.step);
    installOnly(b, "session-bench-install", &.{bench});

    // zig build session-scenario: the session scenarios (clients/conformance/SESSIONS.md).
    const session_scenario = addProgram(b, "session-scenario", "scenario/session_scenario.zig", lockingcenter, target, optimize);
    b.step("session-scenario", "Run the session scenarios").dependOn(&session_scenario.step);

    // zig build v1-programs, session-programs: install only what
    // conformance.sh and session-conformance.sh run (each program is a
    // compilation of its own, minutes on a busy machine).
    installOnly(b, "v1-programs", &.{ example, scenario });
    installOnly(b, "session-programs", &.{ example, session_example, session_scenario });
}

/// Adds the step name that runs the tests of path.
fn addTests(
    b: *std.Build,
    name: []const u8,
    path: []const u8,
    lockingcenter: *std.Build.Module,
    options: *std.Build.Step.Options,
    target: std.Build.ResolvedTarget,
    optimize: std.builtin.OptimizeMode,
) void {
    const tests = b.addTest(.{
        .root_source_file = b.path(path),
        .target = target,
        .optimize = optimize,
    });
    tests.root_module.addImport("lockingcenter", lockingcenter);
    tests.root_module.addOptions("build_options", options);
    b.step(name, "Run the unit tests of this path").dependOn(&b.addRunArtifact(tests).step);
}

fn installOnly(b: *std.Build, name: []const u8, runs: []const *std.Build.Step.Run) void {
    const step = b.step(name, "Install only these programs");
    for (runs) |run| step.dependOn(&b.addInstallArtifact(run.producer.?, .{}).step);
}

/// Adds an installed program that imports the client, and returns the step
/// that runs it with the arguments after `--`.
fn addProgram(
    b: *std.Build,
    name: []const u8,
    path: []const u8,
    lockingcenter: *std.Build.Module,
    target: std.Build.ResolvedTarget,
    optimize: std.builtin.OptimizeMode,
) *std.Build.Step.Run {
    const exe = b.addExecutable(.{
        .name = name,
        .root_source_file = b.path(path),
        .target = target,
        .optimize = optimize,
    });
    exe.root_module.addImport("lockingcenter", lockingcenter);
    b.installArtifact(exe);
    const run = b.addRunArtifact(exe);
    if (b.args) |args| run.addArgs(args);
    return run;
}
