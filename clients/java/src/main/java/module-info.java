/** The Locking-Center client: the v1 client and the session client, JDK only. */
module io.github.lockingcenter {
    exports io.github.lockingcenter;
}
