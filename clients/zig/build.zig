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
    const tests = b.addTest(.{
        .root_source_file = b.path("src/tests.zig"),
        .target = target,
        .optimize = optimize,
    });
    tests.root_module.addImport("lockingcenter", lockingcenter);
    tests.root_module.addOptions("build_options", options);
    const run_tests = b.addRunArtifact(tests);
    b.step("test", "Run the unit tests").dependOn(&run_tests.step);

    // zig build example -- host:port
    const example = addProgram(b, "example", "examples/example.zig", lockingcenter, target, optimize);
    b.step("example", "Run the example").dependOn(&example.step);

    // zig build scenario: the live conformance scenario (needs LC_* in the environment).
    const scenario = addProgram(b, "scenario", "scenario/scenario.zig", lockingcenter, target, optimize);
    b.step("scenario", "Run the live conformance scenario").dependOn(&scenario.step);
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
