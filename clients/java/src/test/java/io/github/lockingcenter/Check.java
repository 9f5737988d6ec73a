package io.github.lockingcenter;

import java.util.ArrayList;
import java.util.List;

/** A tiny test runner: named checks, a summary line, an exit status. */
final class Check {
    interface Body {
        void run() throws Exception;
    }

    private int passed;
    private final List<String> failures = new ArrayList<>();

    void test(String name, Body body) {
        try {
            body.run();
            passed++;
            System.out.println("ok   " + name);
        } catch (Throwable t) {
            failures.add(name + ": " + t);
            System.out.println("FAIL " + name + ": " + t);
            t.printStackTrace(System.out);
        }
    }

    static void isTrue(boolean cond, String message) {
        if (!cond) {
            throw new AssertionError(message);
        }
    }

    static void equal(Object got, Object want, String message) {
        if (!java.util.Objects.equals(got, want)) {
            throw new AssertionError(message + ": got " + got + ", want " + want);
        }
    }

    /** Runs body and returns what it threw, failing when it threw nothing. */
    static Throwable thrown(Body body, String message) {
        try {
            body.run();
        } catch (Throwable t) {
            return t;
        }
        throw new AssertionError(message + ": nothing thrown");
    }

    /** Prints the summary and returns the exit status. */
    int finish() {
        System.out.println();
        failures.forEach(f -> System.out.println("failed: " + f));
        System.out.println(passed + " passed, " + failures.size() + " failed");
        return failures.isEmpty() ? 0 : 1;
    }
}
