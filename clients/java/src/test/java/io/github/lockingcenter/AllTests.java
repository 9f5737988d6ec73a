package io.github.lockingcenter;

/** Runs every test of the client: {@code java -cp ... io.github.lockingcenter.AllTests}. */
public final class AllTests {
    private AllTests() {}

    public static void main(String[] args) throws Exception {
        Check check = new Check();
        VectorsTest.run(check);
        ClientTest.run(check);
        System.exit(check.finish());
    }
}
