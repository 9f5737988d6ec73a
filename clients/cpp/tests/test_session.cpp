// Unit tests of the C++ session client (lockingcenter/session.hpp): the
// handles' types (move-only, destructors that never throw, a key that the
// standard lock types take), the error family, a silent server, and, when
// LC_ADDR names a live lcd, the standard lock types, the loss token and the
// destructors against it. The codec is the C library's, tested by
// clients/c/tests/test_session.c, which session-conformance.sh runs too.
#include <lockingcenter/session.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

namespace lc = lockingcenter;
using namespace std::chrono_literals;

static_assert(!std::is_copy_constructible_v<lc::session> && std::is_nothrow_move_constructible_v<lc::session>);
static_assert(!std::is_copy_constructible_v<lc::lock> && std::is_nothrow_move_constructible_v<lc::lock>);
static_assert(std::is_nothrow_destructible_v<lc::session> && std::is_nothrow_destructible_v<lc::lock>);
static_assert(std::is_base_of_v<lc::error, lc::session_error> && std::is_base_of_v<lc::session_error, lc::timeout_error>);
// Lockable, TimedLockable, SharedLockable, SharedTimedLockable: the
// standard lock types instantiate over a key.
template class std::unique_lock<lc::key>;
template class std::shared_lock<lc::key>;
static_assert(std::is_same_v<decltype(std::declval<lc::key&>().try_lock_for(1s)), bool>);
static_assert(std::is_same_v<decltype(std::declval<lc::key&>().try_lock_until(std::chrono::steady_clock::now())), bool>);
static_assert(std::is_same_v<decltype(std::declval<lc::key&>().try_lock_shared_for(1s)), bool>);

namespace {

int failures = 0;

void check(bool ok, const std::string& what) {
    if (!ok) {
        std::cout << "FAIL " << what << std::endl;
        failures++;
    }
}

void test_error_family() {
    struct want {
        lc_status st;
        std::function<bool(const std::exception&)> is;
    } cases[] = {
        {LC_ERR_TIMEOUT, [](auto& e) { return dynamic_cast<const lc::timeout_error*>(&e) != nullptr; }},
        {LC_ERR_READ_TIMEOUT, [](auto& e) { return dynamic_cast<const lc::timeout_error*>(&e) != nullptr; }},
        {LC_ERR_CANCELLED, [](auto& e) { return dynamic_cast<const lc::acquire_cancelled_error*>(&e) != nullptr; }},
        {LC_ERR_STALE_TOKEN, [](auto& e) { return dynamic_cast<const lc::stale_token_error*>(&e) != nullptr; }},
        {LC_ERR_LEASE_EXPIRED, [](auto& e) { return dynamic_cast<const lc::lock_lost_error*>(&e) != nullptr; }},
        {LC_ERR_SESSION_EXPIRED, [](auto& e) { return dynamic_cast<const lc::session_expired_error*>(&e) != nullptr; }},
        {LC_ERR_UNAUTHENTICATED, [](auto& e) { return dynamic_cast<const lc::unauthenticated_error*>(&e) != nullptr; }},
        {LC_ERR_FORBIDDEN, [](auto& e) { return dynamic_cast<const lc::forbidden_error*>(&e) != nullptr; }},
        {LC_ERR_NOT_LEADER, [](auto& e) { return dynamic_cast<const lc::not_leader_error*>(&e) != nullptr; }},
        {LC_ERR_DEADLOCK, [](auto& e) { return dynamic_cast<const lc::refused_error*>(&e) != nullptr; }},
        {LC_ERR_PROTOCOL, [](auto& e) { return dynamic_cast<const lc::connection_error*>(&e) != nullptr; }},
        {LC_ERR_INVALID_KEY, [](auto& e) { return dynamic_cast<const lc::invalid_key_error*>(&e) != nullptr; }},
    };
    for (auto& c : cases) {
        try {
            lc::detail::throw_status(c.st, "op");
        } catch (const lc::session_error& e) {
            check(c.is(e) && e.status() == c.st, std::string("error family: ") + lc_strerror(c.st) + ": " + e.what());
        } catch (const std::exception& e) {
            check(c.is(e), std::string("error family: ") + lc_strerror(c.st) + ": " + e.what());
        }
    }
}

void test_silent_server() {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof sa;
    ::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa);
    ::listen(fd, 4);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
    std::string addr = "127.0.0.1:" + std::to_string(ntohs(sa.sin_port));
    lc::session_options o;
    o.read_timeout = 300ms;
    try {
        lc::session s{addr, o};
        check(false, "silent server: a session opened");
    } catch (const lc::timeout_error& e) {
        check(e.status() == LC_ERR_READ_TIMEOUT, std::string("silent server: ") + e.what());
    }
    ::close(fd);
}

void test_invalid_address() {
    try {
        lc::session s{"no port here"};
        check(false, "an address without a port was taken");
    } catch (const lc::connection_error& e) {
        check(e.status() == LC_ERR_INVALID_ADDRESS, std::string("invalid address: ") + e.what());
    }
}

std::string live_key(const std::string& name) { return "cpp/unit/" + name + "/" + std::to_string(::getpid()); }

void test_live_lock_types(const std::string& addr) {
    lc::session a{addr, {}}, b{addr, {}};
    lc::key ka{a, live_key("types")}, kb{b, live_key("types")};
    {
        std::scoped_lock g{ka};
        check(ka.token() != 0 && ka.held(), "scoped_lock: no token");
        check(!kb.try_lock(), "try_lock of a key held by another session");
        check(!kb.try_lock_for(100ms), "try_lock_for of a held key");
    }
    std::unique_lock u{kb, std::defer_lock};
    check(u.try_lock_until(std::chrono::steady_clock::now() + 1s), "try_lock_until of a free key");
    u.unlock();
    std::shared_lock r1{ka}, r2{kb};
    check(a.describe(live_key("types")).holders.size() == 2, "shared_lock: two holders");
}

void test_live_loss_and_destructors(const std::string& addr) {
    lc::session s{addr, {}}, other{addr, {}};
    auto k = live_key("loss");
    lc::acquire_options o;
    o.lease = 300ms;
    std::mutex mu;
    std::condition_variable cv;
    bool called = false;
    o.on_lost = [&](lc::lost_reason r) {
        std::lock_guard g{mu};
        called = r == lc::lost_reason::lease_expired;
        cv.notify_all();
    };
    auto l = s.acquire(k, o);
#ifdef LOCKINGCENTER_STOP_TOKEN
    auto token = l.lost_token();
    check(!token.stop_requested(), "lost_token stopped while held");
#endif
    {
        std::unique_lock g{mu};
        cv.wait_for(g, 5s, [&] { return called; });
    }
    check(called && l.lost() == lc::lost_reason::lease_expired, "the lease's loss was not reported");
#ifdef LOCKINGCENTER_STOP_TOKEN
    check(token.stop_requested(), "lost_token not stopped at the loss");
#endif
    {
        auto held = s.acquire(live_key("dtor"));
        check(!other.try_acquire(live_key("dtor")), "a held key was granted to another session");
    } // the destructor releases
    check(other.try_acquire(live_key("dtor")).has_value(), "the destructor did not release");
    lc::lock moved = s.acquire(live_key("moved"));
    lc::lock to = std::move(moved);
    check(!moved && to && to.held(), "a moved lock");
}

} // namespace

int main() {
    test_error_family();
    test_silent_server();
    test_invalid_address();
    if (const char* addr = std::getenv("LC_ADDR"); addr != nullptr && *addr != '\0') {
        try {
            test_live_lock_types(addr);
            test_live_loss_and_destructors(addr);
        } catch (const std::exception& e) {
            check(false, std::string("live: ") + e.what());
        }
    } else {
        std::cout << "LC_ADDR is not set: the live tests are skipped" << std::endl;
    }
    std::cout << (failures == 0 ? "ok" : "FAIL") << " C++ session unit tests, " << failures << " failed" << std::endl;
    return failures == 0 ? 0 : 1;
}
