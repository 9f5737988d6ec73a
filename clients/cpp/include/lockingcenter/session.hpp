// lockingcenter/session.hpp - the session client of Locking-Center for C++
// (docs/protocol.md, "Mutex port, session protocol (v2)"), on the C
// library (clients/c: link liblockingcenter.a, -pthread, and -lssl -lcrypto
// when it was built with OpenSSL).
//
//     lockingcenter::session s{"localhost:22119", {.name = "worker-1"}};
//     lockingcenter::key k{s, "orders/batch-7"};
//     {
//         std::scoped_lock guard{k};          // k meets Lockable and TimedLockable
//         // ... exclusive work; k.token() goes with every write ...
//     }
//     lockingcenter::lock l = s.acquire("jobs/nightly", {.lease = 30s});
//
// A session and a lock are move-only RAII handles: the session's
// destructor closes it (CLOSE, every lock released), a lock's destructor
// releases it; both are bounded by the session's read timeout and never
// throw. Every failure is an lockingcenter::error; those of sessions are a
// session_error carrying the status and the server's message.
#ifndef LOCKINGCENTER_SESSION_HPP
#define LOCKINGCENTER_SESSION_HPP

#include <lockingcenter/client.hpp>

#include <lc_session.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#if __cplusplus >= 202002L && __has_include(<stop_token>)
#include <stop_token>
#if defined(__cpp_lib_jthread)
#define LOCKINGCENTER_STOP_TOKEN 1
#endif
#endif

namespace lockingcenter {

/// A failure of the session client: status() is the C library's code,
/// server_message() what the server said (empty when it said nothing).
class session_error : public error {
public:
    session_error(lc_status status, const std::string& what, std::string server_message)
        : error(what + ": " + lc_strerror(status) + (server_message.empty() ? "" : " (" + server_message + ")")),
          status_(status), message_(std::move(server_message)) {}
    lc_status status() const noexcept { return status_; }
    const std::string& server_message() const noexcept { return message_; }

private:
    lc_status status_;
    std::string message_;
};

#define LOCKINGCENTER_SESSION_ERROR(name, doc)     \
    /** doc */                                      \
    class name : public session_error {             \
    public:                                         \
        using session_error::session_error;         \
    };
LOCKINGCENTER_SESSION_ERROR(timeout_error, "The wait of an acquire ran out on the server, or no answer came in time.")
LOCKINGCENTER_SESSION_ERROR(acquire_cancelled_error, "The acquire was cancelled; the request left the queue.")
LOCKINGCENTER_SESSION_ERROR(stale_token_error, "The token is not a holder of that key now; nothing changed.")
LOCKINGCENTER_SESSION_ERROR(lock_lost_error, "The lock ended without a release: status() says why.")
LOCKINGCENTER_SESSION_ERROR(session_expired_error, "The session's TTL passed, or it was closed.")
LOCKINGCENTER_SESSION_ERROR(unauthenticated_error, "The server wants a valid token.")
LOCKINGCENTER_SESSION_ERROR(forbidden_error, "The token may not use that key.")
LOCKINGCENTER_SESSION_ERROR(not_leader_error, "No address given leads the cluster.")
LOCKINGCENTER_SESSION_ERROR(refused_error, "The server refused the request (deadlock, limit mismatch, ...).")
LOCKINGCENTER_SESSION_ERROR(connection_error, "No connection, a network failure, TLS, or a protocol error.")
#undef LOCKINGCENTER_SESSION_ERROR

namespace detail {

[[noreturn]] inline void throw_status(lc_status st, const std::string& what) {
    std::string msg = lc_last_message();
    switch (st) {
    case LC_ERR_TIMEOUT:
    case LC_ERR_READ_TIMEOUT: throw timeout_error(st, what, msg);
    case LC_ERR_CANCELLED: throw acquire_cancelled_error(st, what, msg);
    case LC_ERR_STALE_TOKEN: throw stale_token_error(st, what, msg);
    case LC_ERR_LOCK_LOST:
    case LC_ERR_LEASE_EXPIRED:
    case LC_ERR_RESET:
    case LC_ERR_LOCK_RELEASED:
    case LC_ERR_LOCK_ORPHANED: throw lock_lost_error(st, what, msg);
    case LC_ERR_SESSION_EXPIRED:
    case LC_ERR_SESSION_CLOSED: throw session_expired_error(st, what, msg);
    case LC_ERR_UNAUTHENTICATED: throw unauthenticated_error(st, what, msg);
    case LC_ERR_FORBIDDEN: throw forbidden_error(st, what, msg);
    case LC_ERR_NOT_LEADER: throw not_leader_error(st, what, msg);
    case LC_ERR_INVALID_KEY: throw invalid_key_error(what + ": " + lc_strerror(st));
    case LC_ERR_INVALID_SOURCE: throw invalid_source_error(what + ": " + lc_strerror(st));
    case LC_ERR_RESOLVE:
    case LC_ERR_CONNECT:
    case LC_ERR_IO:
    case LC_ERR_CLOSED:
    case LC_ERR_PROTOCOL:
    case LC_ERR_TLS:
    case LC_ERR_NO_TLS:
    case LC_ERR_SYSTEM:
    case LC_ERR_INVALID_ADDRESS: throw connection_error(st, what, msg);
    default: throw refused_error(st, what, msg);
    }
}

inline void check(lc_status st, const std::string& what) {
    if (st != LC_OK) throw_status(st, what);
}

inline const char* c_str_or_null(const std::string& s) { return s.empty() ? nullptr : s.c_str(); }

inline int millis(std::chrono::milliseconds d) {
    return static_cast<int>(d.count() > 0x7fffffff ? 0x7fffffff : d.count());
}

} // namespace detail

/// Why a lock ended (lock::lost()).
enum class lost_reason {
    released,        ///< released, by lock::release or the session's close
    orphaned,        ///< lock::orphan: the server still holds it
    lease_expired,   ///< its lease ran out
    session_expired, ///< its session's TTL passed
    session_closed,  ///< the session was closed, and the server could not be told
    reset,           ///< a reset took the key
    lost,            ///< the server no longer holds it (for no reason more exact)
};

inline lost_reason reason_of(lc_status st) {
    switch (st) {
    case LC_ERR_LOCK_RELEASED: return lost_reason::released;
    case LC_ERR_LOCK_ORPHANED: return lost_reason::orphaned;
    case LC_ERR_LEASE_EXPIRED: return lost_reason::lease_expired;
    case LC_ERR_SESSION_EXPIRED: return lost_reason::session_expired;
    case LC_ERR_SESSION_CLOSED: return lost_reason::session_closed;
    case LC_ERR_RESET: return lost_reason::reset;
    default: return lost_reason::lost;
    }
}

/// Options of a session. read_timeout bounds every call that waits for no
/// key (the connect, release, renew, describe, close, and the destructors).
struct session_options {
    std::string name;                               ///< the source; empty: the client's IP
    std::chrono::milliseconds ttl{0};               ///< 0: the server's default (10 s)
    std::string token;                              ///< credential; empty: none
    std::chrono::milliseconds connect_timeout{default_connect_timeout};
    std::chrono::milliseconds read_timeout{default_read_timeout};
    bool tls = false;                               ///< needs the C library built with OpenSSL
    std::string ca_file, cert_file, key_file, server_name;

    /// from_env fills token, ca_file, cert_file and key_file from LC_TOKEN,
    /// LC_CA_FILE, LC_CERT_FILE and LC_KEY_FILE, as lc-cli reads them; TLS
    /// is on when a CA is named.
    static session_options from_env() {
        session_options o;
        auto get = [](const char* n) { const char* v = std::getenv(n); return std::string(v ? v : ""); };
        o.token = get("LC_TOKEN");
        o.ca_file = get("LC_CA_FILE");
        o.cert_file = get("LC_CERT_FILE");
        o.key_file = get("LC_KEY_FILE");
        o.tls = !o.ca_file.empty();
        return o;
    }
};

/// Options of an acquire.
struct acquire_options {
    std::optional<std::chrono::milliseconds> wait; ///< none: for ever; 0: try once; n: at most n, on the server
    std::chrono::milliseconds lease{0};            ///< 0: none, the lock lives as long as the session
    std::chrono::milliseconds delay{0};            ///< lock-delay after a loss, at most 60 s
    bool shared = false;
    std::uint32_t limit = 0;                       ///< a semaphore of this many holders
    std::int32_t priority = 0;
    bool reentrant = false;
    std::string owner;                             ///< who within the session
    std::string note;                              ///< the holder's note
    std::function<void(lost_reason)> on_lost;      ///< on the session's thread; must not wait on the session
    const canceller* cancel = nullptr;             ///< cancel() from any thread ends the wait (CANCEL sent)
#ifdef LOCKINGCENTER_STOP_TOKEN
    std::stop_token stop;                          ///< a stop request ends the wait likewise
#endif
};

class session;

/// A held lock: move-only; its destructor releases it (bounded, never throws).
class lock {
public:
    lock() noexcept = default;
    lock(lock&& o) noexcept : l_(std::exchange(o.l_, nullptr)), state_(std::move(o.state_)) {}
    lock& operator=(lock&& o) noexcept {
        if (this != &o) {
            reset();
            l_ = std::exchange(o.l_, nullptr);
            state_ = std::move(o.state_);
        }
        return *this;
    }
    lock(const lock&) = delete;
    lock& operator=(const lock&) = delete;
    ~lock() { reset(); }

    /// Whether this handle has a lock (held or ended); false once moved from.
    explicit operator bool() const noexcept { return l_ != nullptr; }

    /// The fencing token: give it to the resource with every write.
    std::uint64_t token() const noexcept { return l_ ? lc_lock_token(l_) : 0; }
    std::uint32_t count() const noexcept { return l_ ? lc_lock_count(l_) : 0; }
    std::string_view key() const noexcept {
        if (!l_) return {};
        std::size_t n = 0;
        const void* k = lc_lock_key(l_, &n);
        return {static_cast<const char*>(k), n};
    }

    /// Whether it is still held, as far as the client knows.
    bool held() const noexcept { return l_ && lc_lock_lost(l_) == LC_OK; }

    /// Why it ended; empty while held.
    std::optional<lost_reason> lost() const noexcept {
        if (held() || !l_) return std::nullopt;
        return reason_of(lc_lock_lost(l_));
    }

#ifdef LOCKINGCENTER_STOP_TOKEN
    /// A token whose stop is requested when the lock is lost (not at a release).
    std::stop_token lost_token() const noexcept { return state_ ? state_->stop.get_token() : std::stop_token{}; }
#endif

    /// Releases it; again, or after a loss, it does nothing. Throws
    /// stale_token_error when the server no longer held it.
    void release() {
        if (l_) detail::check(lc_lock_release(l_), "lockingcenter: release");
    }

    /// Starts the lease again (0: the last lease it had).
    void renew(std::chrono::milliseconds lease = std::chrono::milliseconds{0}) {
        if (!l_) throw lock_lost_error(LC_ERR_LOCK_LOST, "lockingcenter: renew", "");
        detail::check(lc_lock_renew(l_, static_cast<std::uint32_t>(lease.count())), "lockingcenter: renew");
    }

    /// Stops caring: nothing is released, the server keeps the lock.
    void orphan() noexcept {
        if (l_) lc_lock_orphan(l_);
    }

    /// The C handle, for the C library's calls.
    lc_lock_t* native_handle() const noexcept { return l_; }

private:
    friend class session;
    // What the loss callback needs; it outlives the C lock (lc_lock_free
    // waits for a running callback).
    struct state {
        std::function<void(lost_reason)> on_lost;
#ifdef LOCKINGCENTER_STOP_TOKEN
        std::stop_source stop;
#endif
    };
    static void lost_trampoline(lc_lock_t*, lc_status why, void* arg) noexcept {
        auto* st = static_cast<state*>(arg);
#ifdef LOCKINGCENTER_STOP_TOKEN
        st->stop.request_stop();
#endif
        if (st->on_lost) {
            try {
                st->on_lost(reason_of(why));
            } catch (...) {
            }
        }
    }
    lock(lc_lock_t* l, std::unique_ptr<state> st) noexcept : l_(l), state_(std::move(st)) {}
    void reset() noexcept {
        if (l_) lc_lock_free(std::exchange(l_, nullptr));
        state_.reset();
    }

    lc_lock_t* l_ = nullptr;
    std::unique_ptr<state> state_;
};

/// What DESCRIBE reports of a key.
struct key_info {
    std::vector<lc_holder> holders;
    std::uint32_t queue = 0;
};

/// A session: move-only; its destructor closes it (bounded, never throws).
/// It is safe to use from many threads at once.
class session {
public:
    /// Connects to the first of addresses ("host:port", comma-separated)
    /// that serves a session, following a cluster's leader. Throws
    /// connection_error, timeout_error, unauthenticated_error, not_leader_error.
    explicit session(const std::string& addresses, const session_options& o = {}) {
        lc_session_options c;
        lc_session_options_init(&c);
        c.name = detail::c_str_or_null(o.name);
        c.ttl_ms = static_cast<std::uint32_t>(o.ttl.count());
        c.token = detail::c_str_or_null(o.token);
        c.connect_timeout_ms = detail::millis(o.connect_timeout);
        c.read_timeout_ms = detail::millis(o.read_timeout);
        c.tls = o.tls;
        c.ca_file = detail::c_str_or_null(o.ca_file);
        c.cert_file = detail::c_str_or_null(o.cert_file);
        c.key_file = detail::c_str_or_null(o.key_file);
        c.server_name = detail::c_str_or_null(o.server_name);
        detail::check(lc_session_connect(&s_, addresses.c_str(), &c), "lockingcenter: session at " + addresses);
    }
    session(session&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
    session& operator=(session&& o) noexcept {
        if (this != &o) {
            close_quietly();
            s_ = std::exchange(o.s_, nullptr);
        }
        return *this;
    }
    session(const session&) = delete;
    session& operator=(const session&) = delete;
    ~session() { close_quietly(); }

    /// Waits for key (see acquire_options::wait). Throws timeout_error (the
    /// wait ran out), acquire_cancelled_error, refused_error (deadlock,
    /// limit mismatch, upgrade, busy for a try), forbidden_error,
    /// session_expired_error, ...
    lock acquire(std::string_view key, const acquire_options& o = {}) {
        lock l;
        lc_status st = acquire_into(key, o, l);
        if (st != LC_OK) detail::throw_status(st, "lockingcenter: acquire " + std::string(key));
        return l;
    }

    /// A try: empty when the key is held (busy is not an error).
    std::optional<lock> try_acquire(std::string_view key, acquire_options o = {}) {
        o.wait = std::chrono::milliseconds{0};
        return acquire_or_busy(key, o);
    }

    /// An acquire that waits at most d, measured by the server: empty when
    /// the wait ran out.
    template <class Rep, class Period>
    std::optional<lock> try_acquire_for(std::string_view key, std::chrono::duration<Rep, Period> d,
                                        acquire_options o = {}) {
        auto ms = std::chrono::ceil<std::chrono::milliseconds>(d);
        o.wait = ms.count() > 0 ? ms : std::chrono::milliseconds{0};
        return acquire_or_busy(key, o);
    }

    /// Releases the lock of token on key, whatever handle holds it. Throws
    /// stale_token_error when the session does not hold it.
    void release(std::string_view key, std::uint64_t token) {
        detail::check(lc_release_token(s_, key.data(), key.size(), token), "lockingcenter: release");
    }

    /// DESCRIBE: the holders of key and its queue.
    key_info describe(std::string_view key, std::size_t max_holders = 64) {
        key_info info;
        info.holders.resize(max_holders);
        std::size_t n = 0;
        detail::check(lc_describe(s_, key.data(), key.size(), info.holders.data(), max_holders, &n, &info.queue),
                      "lockingcenter: describe");
        info.holders.resize(n < max_holders ? n : max_holders);
        return info;
    }

    std::uint64_t id() const noexcept { return lc_session_id(s_); }
    std::chrono::milliseconds ttl() const noexcept { return std::chrono::milliseconds{lc_session_ttl_ms(s_)}; }
    std::string address() const {
        char buf[256];
        lc_session_address(s_, buf, sizeof buf);
        return buf;
    }
    /// Whether the session lives; status() says why it ended.
    bool alive() const noexcept { return lc_session_status(s_) == LC_OK; }
    lc_status status() const noexcept { return lc_session_status(s_); }

    /// Closes the session (CLOSE: every lock released). Throws when the
    /// server could not be told (the session then ends with its TTL).
    void close() {
        lc_session* s = std::exchange(s_, nullptr);
        if (s != nullptr) detail::check(lc_session_close(s), "lockingcenter: close");
    }

    lc_session* native_handle() const noexcept { return s_; }

private:
    void close_quietly() noexcept {
        if (s_ != nullptr) lc_session_close(std::exchange(s_, nullptr));
    }

    std::optional<lock> acquire_or_busy(std::string_view key, const acquire_options& o) {
        lock l;
        lc_status st = acquire_into(key, o, l);
        if (st == LC_BUSY || (st == LC_ERR_TIMEOUT && o.wait && o.wait->count() > 0)) return std::nullopt;
        if (st != LC_OK) detail::throw_status(st, "lockingcenter: acquire " + std::string(key));
        return std::optional<lock>{std::move(l)};
    }

    lc_status acquire_into(std::string_view key, const acquire_options& o, lock& out) {
        if (s_ == nullptr) throw session_expired_error(LC_ERR_SESSION_CLOSED, "lockingcenter: acquire", "");
        lc_acquire_options c;
        lc_acquire_options_init(&c);
        c.wait_ms = o.wait ? o.wait->count() : -1;
        c.lease_ms = static_cast<std::uint32_t>(o.lease.count());
        c.delay_ms = static_cast<std::uint32_t>(o.delay.count());
        c.shared = o.shared;
        c.limit = o.limit;
        c.priority = o.priority;
        c.reentrant = o.reentrant;
        c.owner = o.owner.empty() ? nullptr : o.owner.c_str();
        c.note = o.note.empty() ? nullptr : o.note.c_str();
        auto st = std::make_unique<lock::state>();
        st->on_lost = o.on_lost;
        c.on_lost = &lock::lost_trampoline;
        c.on_lost_arg = st.get();
        lc_cancel cancel{{-1, -1}};
        std::optional<canceller> own; // fired by o.stop
        const canceller* fire = o.cancel;
#ifdef LOCKINGCENTER_STOP_TOKEN
        std::optional<std::stop_callback<std::function<void()>>> on_stop;
        if (o.stop.stop_possible()) {
            if (fire != nullptr) throw std::invalid_argument("lockingcenter: acquire takes cancel or stop, not both");
            own.emplace();
            fire = &*own;
            on_stop.emplace(o.stop, std::function<void()>([fire] { fire->cancel(); }));
        }
#endif
        if (fire != nullptr) {
            cancel.fds[0] = fire->native_handle();
            c.cancel = &cancel;
        }
        lc_lock_t* l = nullptr;
        lc_status r = lc_acquire(s_, key.data(), key.size(), &c, &l);
        if (r == LC_OK) out = lock(l, std::move(st));
        return r;
    }

    lc_session* s_ = nullptr;
};

/// A key of a session as a standard lock type: it meets Lockable and
/// TimedLockable (std::unique_lock, std::scoped_lock, std::lock_guard) and,
/// in shared mode, SharedLockable and SharedTimedLockable (std::shared_lock).
/// Each thread is an owner of its own within the session, so two threads
/// of one process queue behind each other as two clients would. try_lock
/// tries once (false: busy); try_lock_for waits on the server. The lock of
/// a thread is kept here until its unlock; token() is the exclusive one's.
class key {
public:
    key(session& s, std::string name, acquire_options base = {})
        : s_(&s), name_(std::move(name)), base_(std::move(base)) {}
    key(const key&) = delete;
    key& operator=(const key&) = delete;

    void lock() { take(false, std::nullopt); }
    bool try_lock() { return take(false, std::chrono::milliseconds{0}); }
    template <class Rep, class Period>
    bool try_lock_for(const std::chrono::duration<Rep, Period>& d) {
        return take(false, bound(d));
    }
    template <class Clock, class Duration>
    bool try_lock_until(const std::chrono::time_point<Clock, Duration>& t) {
        return try_lock_for(t - Clock::now());
    }
    void unlock() { give(false); }

    void lock_shared() { take(true, std::nullopt); }
    bool try_lock_shared() { return take(true, std::chrono::milliseconds{0}); }
    template <class Rep, class Period>
    bool try_lock_shared_for(const std::chrono::duration<Rep, Period>& d) {
        return take(true, bound(d));
    }
    template <class Clock, class Duration>
    bool try_lock_shared_until(const std::chrono::time_point<Clock, Duration>& t) {
        return try_lock_shared_for(t - Clock::now());
    }
    void unlock_shared() { give(true); }

    const std::string& name() const noexcept { return name_; }

    /// The fencing token of the calling thread's lock of the key (0: none).
    std::uint64_t token() const {
        std::lock_guard<std::mutex> g(mu_);
        auto it = held_.find(std::this_thread::get_id());
        return it == held_.end() ? 0 : it->second.token();
    }

    /// Whether the calling thread's lock is still held (false when lost).
    bool held() const {
        std::lock_guard<std::mutex> g(mu_);
        auto it = held_.find(std::this_thread::get_id());
        return it != held_.end() && it->second.held();
    }

private:
    template <class Rep, class Period>
    static std::chrono::milliseconds bound(const std::chrono::duration<Rep, Period>& d) {
        auto ms = std::chrono::ceil<std::chrono::milliseconds>(d);
        return ms.count() > 0 ? ms : std::chrono::milliseconds{0};
    }

    bool take(bool shared, std::optional<std::chrono::milliseconds> wait) {
        acquire_options o = base_;
        o.shared = shared;
        o.wait = wait;
        if (o.owner.empty()) o.owner = "thread-" + std::to_string(std::hash<std::thread::id>{}(std::this_thread::get_id()));
        std::optional<lockingcenter::lock> got;
        if (wait) got = s_->try_acquire_for(name_, *wait, o);
        else got = s_->acquire(name_, o);
        if (!got) return false;
        std::lock_guard<std::mutex> g(mu_);
        held_[std::this_thread::get_id()] = std::move(*got);
        return true;
    }

    void give(bool) {
        lockingcenter::lock l;
        {
            std::lock_guard<std::mutex> g(mu_);
            auto it = held_.find(std::this_thread::get_id());
            if (it == held_.end()) return;
            l = std::move(it->second);
            held_.erase(it);
        }
        try {
            l.release();
        } catch (const stale_token_error&) {
            // Lost meanwhile: the key is not ours any more, which is what unlock wants.
        }
    }

    session* s_;
    std::string name_;
    acquire_options base_;
    mutable std::mutex mu_;
    std::map<std::thread::id, lockingcenter::lock> held_;
};

} // namespace lockingcenter

#endif
