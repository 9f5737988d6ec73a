// lockingcenter/client.hpp - header-only C++17 client of Locking-Center, a
// lock server that grants named keys to one holder at a time, waiters
// served in order of arrival.
//
// Every call opens one TCP connection to the mutex port, sends one request,
// reads the one-byte answer and closes. A lock is not tied to the
// connection: it stays held until unlock or a reset, even after the process
// exits. Keys and sources are byte strings (std::string_view, so 0x00 and
// any other byte may appear). POSIX sockets; no dependencies.
//
// Every call that does not wait for a key (try_lock, unlock, the resets,
// and the release of wait) gives up after the client's read timeout with a
// network_error whose code() is std::errc::timed_out. A lock has none.
//
//     lockingcenter::client c{"localhost:22119", "worker-1"};
//     c.lock("orders/batch-7");
//     // ... exclusive work ...
//     c.unlock("orders/batch-7");
#ifndef LOCKINGCENTER_CLIENT_HPP
#define LOCKINGCENTER_CLIENT_HPP

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

namespace lockingcenter {

/// Bounds of keys and sources, in bytes.
inline constexpr std::size_t max_key_len = 127;
inline constexpr std::size_t max_source_len = 127;

/// Connect timeout of a client unless its constructor is told otherwise.
inline constexpr std::chrono::milliseconds default_connect_timeout{5000};

/// Read timeout of a client unless its constructor is told otherwise.
inline constexpr std::chrono::milliseconds default_read_timeout{10000};

/// Action bytes of the mutex port.
enum class action : unsigned char { lock = 1, unlock = 2, reset_key = 3, reset_source = 4, try_lock = 5 };

/// Answer bytes of the mutex port.
inline constexpr unsigned char answer_ok = '+';
inline constexpr unsigned char answer_failed = '-';
inline constexpr unsigned char answer_busy = '#';

/// What an answer means when it is not a failure.
enum class outcome { ok, busy };

/// Base of every failure the server or the network causes.
class error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

/// The server answered '-': it refused the request, could not store it, or
/// a reset of the source withdrew it.
class failed_error : public error {
public:
    using error::error;
};

/// The server answered a byte the protocol does not define for the request.
class protocol_error : public error {
public:
    using error::error;
};

/// Resolving, connecting, sending or receiving failed; code() holds the
/// system error where there is one.
class network_error : public error {
public:
    network_error(const std::string& what, std::error_code code)
        : error(code ? what + ": " + code.message() : what), code_(code) {}
    const std::error_code& code() const noexcept { return code_; }

private:
    std::error_code code_;
};

/// A canceller was fired while the call waited; the request was withdrawn.
class cancelled_error : public error {
public:
    using error::error;
};

/// A key that is empty or longer than max_key_len bytes. Nothing was sent.
class invalid_key_error : public std::invalid_argument {
public:
    using std::invalid_argument::invalid_argument;
};

/// A source longer than max_source_len bytes. Nothing was sent.
class invalid_source_error : public std::invalid_argument {
public:
    using std::invalid_argument::invalid_argument;
};

namespace detail {

using steady = std::chrono::steady_clock;
using limit = std::optional<steady::time_point>; // none: wait forever

inline std::string printable(std::string_view s) {
    std::string out;
    for (unsigned char ch : s) {
        if (ch >= 0x20 && ch < 0x7f && ch != '\\' && ch != '"') {
            out += static_cast<char>(ch);
        } else {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\x%02x", ch);
            out += buf;
        }
    }
    return '"' + out + '"';
}

inline std::error_code last_error() { return {errno, std::generic_category()}; }

inline limit earliest(limit a, limit b) {
    if (!a) return b;
    if (!b) return a;
    return std::min(*a, *b);
}

inline bool passed(limit l) { return l && steady::now() >= *l; }

/// Throws what a call that ran out of time throws: with a read timeout
/// (above zero) a network_error of std::errc::timed_out, otherwise (the
/// deadline of a timed lock) cancelled_error.
[[noreturn]] inline void expired(const std::string& op, std::chrono::milliseconds read_timeout) {
    if (read_timeout.count() > 0) {
        throw network_error(op + ": no answer within " + std::to_string(read_timeout.count()) + " ms",
                            std::make_error_code(std::errc::timed_out));
    }
    throw cancelled_error(op + ": deadline passed");
}

/// An owned file descriptor.
class fd {
public:
    explicit fd(int f = -1) noexcept : f_(f) {}
    fd(fd&& o) noexcept : f_(std::exchange(o.f_, -1)) {}
    fd& operator=(fd&& o) noexcept {
        if (this != &o) {
            reset();
            f_ = std::exchange(o.f_, -1);
        }
        return *this;
    }
    fd(const fd&) = delete;
    fd& operator=(const fd&) = delete;
    ~fd() { reset(); }
    int get() const noexcept { return f_; }
    void reset() noexcept {
        if (f_ >= 0) {
            int saved = errno;
            ::close(f_);
            errno = saved;
        }
        f_ = -1;
    }

private:
    int f_;
};

inline bool make_nonblocking(int f) {
    int fl = ::fcntl(f, F_GETFL);
    return fl >= 0 && ::fcntl(f, F_SETFL, fl | O_NONBLOCK) == 0 && ::fcntl(f, F_SETFD, FD_CLOEXEC) == 0;
}

enum class ready { yes, expired, cancelled };

/// Waits until f reports events (or an error condition), cancel_fd (-1 for
/// none) becomes readable, or the limit passes. A ready f wins over a
/// cancel, so an answer that has arrived is never thrown away.
inline ready wait_for(int f, short events, int cancel_fd, limit until, const std::string& op) {
    for (;;) {
        pollfd p[2] = {{f, events, 0}, {cancel_fd, POLLIN, 0}};
        int timeout = -1;
        if (until) {
            auto left = std::chrono::ceil<std::chrono::milliseconds>(*until - steady::now()).count();
            timeout = left <= 0 ? 0 : static_cast<int>(std::min<long long>(left, 1 << 30));
        }
        int n = ::poll(p, 2, timeout);
        if (n < 0) {
            if (errno == EINTR) continue;
            throw network_error(op + ": poll", last_error());
        }
        if (p[0].revents != 0) return ready::yes;
        if (p[1].revents != 0) return ready::cancelled;
        if (n == 0 && passed(until)) return ready::expired;
    }
}

inline void check_key(std::string_view key, const std::string& op) {
    if (key.empty() || key.size() > max_key_len) {
        throw invalid_key_error(op + " " + printable(key) + ": key must be 1 to 127 bytes, got " +
                                std::to_string(key.size()));
    }
}

inline void check_source(std::string_view source, const std::string& op) {
    if (source.size() > max_source_len) {
        throw invalid_source_error(op + ": source must be at most 127 bytes, got " + std::to_string(source.size()));
    }
}

inline const char* name(action a) {
    switch (a) {
    case action::lock: return "lock";
    case action::unlock: return "unlock";
    case action::reset_key: return "reset";
    case action::reset_source: return "reset source";
    case action::try_lock: return "trylock";
    }
    return "unknown action";
}

} // namespace detail

/// Encodes one request. key is ignored for action::reset_source and source
/// for action::unlock and action::reset_key. Throws invalid_key_error,
/// invalid_source_error, or std::invalid_argument for an unknown action.
inline std::string encode_request(action a, std::string_view key, std::string_view source) {
    bool with_key = a != action::reset_source;
    bool with_source = a == action::lock || a == action::try_lock || a == action::reset_source;
    if (a < action::lock || a > action::try_lock) throw std::invalid_argument("lockingcenter: unknown action");
    std::string op = detail::name(a);
    if (with_key) detail::check_key(key, op);
    if (with_source) detail::check_source(source, op);
    std::string out(1, static_cast<char>(a));
    if (with_key) {
        out += static_cast<char>(key.size());
        out += key;
    }
    if (with_source) {
        out += static_cast<char>(source.size());
        out += source;
    }
    return out;
}

/// Interprets the answer byte to a request of action a: outcome::ok for
/// '+', outcome::busy for '#' to a try-lock. Throws failed_error for '-' and
/// protocol_error for any other byte.
inline outcome decode_answer(action a, unsigned char answer) {
    if (answer == answer_ok) return outcome::ok;
    if (answer == answer_busy && a == action::try_lock) return outcome::busy;
    std::string op = detail::name(a);
    if (answer == answer_failed) throw failed_error(op + ": server refused the request");
    char buf[64];
    std::snprintf(buf, sizeof buf, ": unexpected answer 0x%02x", answer);
    throw protocol_error(op + buf);
}

/// A cancellation handle for client::lock and client::wait. cancel() may be
/// called from any thread, or from a signal handler; the blocked call
/// closes its connection, so the server withdraws the request, and throws
/// cancelled_error. A cancelled handle stays cancelled.
class canceller {
public:
    /// Throws network_error when no pipe can be made.
    canceller() {
        int fds[2];
        if (::pipe(fds) != 0) throw network_error("lockingcenter: canceller", detail::last_error());
        read_ = detail::fd(fds[0]);
        write_ = detail::fd(fds[1]);
        if (!detail::make_nonblocking(fds[0]) || !detail::make_nonblocking(fds[1])) {
            throw network_error("lockingcenter: canceller", detail::last_error());
        }
    }
    canceller(const canceller&) = delete;
    canceller& operator=(const canceller&) = delete;

    /// Fires the handle. Firing twice is harmless.
    void cancel() const noexcept {
        int saved = errno;
        // The byte is never read, so the handle stays fired; a full pipe
        // means it already is.
        [[maybe_unused]] auto n = ::write(write_.get(), "x", 1);
        errno = saved;
    }

    /// Reports whether cancel() was called.
    bool cancelled() const noexcept {
        pollfd p{read_.get(), POLLIN, 0};
        return ::poll(&p, 1, 0) > 0;
    }

    /// The descriptor that becomes readable once cancelled, for poll().
    int native_handle() const noexcept { return read_.get(); }

private:
    detail::fd read_, write_;
};

/// A client of one Locking-Center server. It holds no connection; all
/// methods are const and safe to call from several threads at once.
class client {
public:
    /// address is "host:port" or "[ipv6]:port" (an empty host means this
    /// machine). source names the owner of the locks for reset by source;
    /// empty lets the server use the client's IP address. connect_timeout
    /// bounds each connect (zero or less: only the system's bound).
    /// read_timeout bounds, from the connect to the answer, every call that
    /// does not wait for a key (zero or less: no bound).
    /// Throws std::invalid_argument for a malformed address and
    /// invalid_source_error for a source over max_source_len bytes.
    explicit client(std::string_view address, std::string_view source = {},
                     std::chrono::milliseconds connect_timeout = default_connect_timeout,
                     std::chrono::milliseconds read_timeout = default_read_timeout)
        : address_(address), source_(source), connect_timeout_(connect_timeout), read_timeout_(read_timeout) {
        detail::check_source(source_, "client");
        auto colon = address_.rfind(':');
        if (colon == std::string::npos) throw std::invalid_argument("lockingcenter: address must be host:port");
        host_ = address_.substr(0, colon);
        port_ = address_.substr(colon + 1);
        if (host_.size() >= 2 && host_.front() == '[' && host_.back() == ']') {
            host_ = host_.substr(1, host_.size() - 2);
        } else if (host_.find_first_of("[]:") != std::string::npos) {
            throw std::invalid_argument("lockingcenter: an IPv6 address must be in brackets: " + address_);
        }
        long value = 0;
        for (char ch : port_) {
            if (ch < '0' || ch > '9' || value > 65535) {
                value = 0;
                break;
            }
            value = value * 10 + (ch - '0');
        }
        if (value < 1 || value > 65535) throw std::invalid_argument("lockingcenter: bad port in " + address_);
    }

    const std::string& address() const noexcept { return address_; }
    const std::string& source() const noexcept { return source_; }

    /// Blocks until key is granted to this client, however long that takes.
    /// Throws invalid_key_error, failed_error (refused, or withdrawn by a
    /// reset of the source), network_error or protocol_error.
    void lock(std::string_view key) const { call(action::lock, key, source_, -1, std::nullopt); }

    /// lock() that gives up when cancel is fired: the connection is closed,
    /// the server withdraws the request, and cancelled_error is thrown.
    void lock(std::string_view key, const canceller& cancel) const {
        call(action::lock, key, source_, cancel.native_handle(), std::nullopt);
    }

    /// Waits up to timeout for key, like std::timed_mutex::try_lock_for.
    /// Returns true when granted, false when the time ran out (the request
    /// is withdrawn). A timeout that has already run out makes it
    /// try_lock(). Throws as lock() does.
    template <class Rep, class Period>
    bool try_lock_for(std::string_view key, const std::chrono::duration<Rep, Period>& timeout) const {
        return timed_lock(key, detail::steady::now() + std::chrono::ceil<detail::steady::duration>(timeout));
    }

    /// Waits until deadline for key; see try_lock_for.
    template <class Clock, class Duration>
    bool try_lock_until(std::string_view key, const std::chrono::time_point<Clock, Duration>& deadline) const {
        auto left = std::chrono::ceil<detail::steady::duration>(deadline - Clock::now());
        return timed_lock(key, detail::steady::now() + left);
    }

    /// Takes key only if it is free now. Returns true when this client now
    /// holds it and false when another holder has it (busy: not a failure).
    /// No answer within the read timeout throws network_error with
    /// std::errc::timed_out.
    bool try_lock(std::string_view key) const {
        return call(action::try_lock, key, source_, -1, std::nullopt) == outcome::ok;
    }

    /// Releases key, whoever holds it. Releasing a free key succeeds.
    void unlock(std::string_view key) const { call(action::unlock, key, {}, -1, std::nullopt); }

    /// Blocks until key is free and returns holding nothing: it takes the
    /// key and releases it at once.
    void wait(std::string_view key) const {
        lock(key);
        unlock(key);
    }

    /// wait() that gives up when cancel is fired (cancelled_error).
    void wait(std::string_view key, const canceller& cancel) const {
        lock(key, cancel);
        unlock(key);
    }

    /// Takes key from its holder; the first waiter gets it.
    void reset_by_key(std::string_view key) const { call(action::reset_key, key, {}, -1, std::nullopt); }

    /// Releases every key held by source and withdraws every parked request
    /// of source (their lock() throws failed_error).
    void reset_by_source(std::string_view source) const {
        call(action::reset_source, {}, source, -1, std::nullopt);
    }

private:
    bool timed_lock(std::string_view key, detail::steady::time_point deadline) const {
        if (deadline <= detail::steady::now()) return try_lock(key);
        try {
            call(action::lock, key, source_, -1, deadline);
            return true;
        } catch (const cancelled_error&) {
            return false; // the deadline passed
        }
    }

    /// Sends one request and reads its answer. A passed deadline or a fired
    /// cancel_fd throws cancelled_error.
    outcome call(action a, std::string_view key, std::string_view source, int cancel_fd,
                 detail::limit deadline) const {
        std::string request = encode_request(a, key, source);
        std::string op = std::string(detail::name(a)) + " " +
                         (a == action::reset_source ? detail::printable(source) : detail::printable(key)) + " at " +
                         address_;
        if (cancel_fd >= 0) {
            pollfd p{cancel_fd, POLLIN, 0};
            if (::poll(&p, 1, 0) > 0) throw cancelled_error(op + ": cancelled");
        }
        detail::fd conn = dial(op, cancel_fd, deadline);
        // A lock waits for its key as long as it takes: no read timeout.
        // Every other call has no deadline but the read timeout.
        std::chrono::milliseconds read_timeout{0};
        if (a != action::lock && read_timeout_.count() > 0) {
            read_timeout = read_timeout_;
            deadline = detail::steady::now() + read_timeout;
        }
        send_all(conn.get(), request, op, cancel_fd, deadline, read_timeout);
        return decode_answer(a, receive(conn.get(), op, cancel_fd, deadline, read_timeout));
    }

    detail::fd dial(const std::string& op, int cancel_fd, detail::limit deadline) const {
        addrinfo hints{};
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        addrinfo* found = nullptr;
        int rc = ::getaddrinfo(host_.empty() ? nullptr : host_.c_str(), port_.c_str(), &hints, &found);
        if (rc != 0) throw network_error(op + ": resolve " + host_ + ": " + ::gai_strerror(rc), {});
        std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> owner(found, &::freeaddrinfo);
        detail::limit connect_limit;
        if (connect_timeout_.count() > 0) connect_limit = detail::steady::now() + connect_timeout_;
        detail::limit until = detail::earliest(deadline, connect_limit);
        std::error_code last = std::make_error_code(std::errc::host_unreachable);
        for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
            detail::fd s(::socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol));
            if (s.get() < 0 || !detail::make_nonblocking(s.get())) {
                last = detail::last_error();
                continue;
            }
#ifdef SO_NOSIGPIPE
            int one = 1;
            ::setsockopt(s.get(), SOL_SOCKET, SO_NOSIGPIPE, &one, sizeof one);
#endif
            if (::connect(s.get(), ai->ai_addr, ai->ai_addrlen) == 0) return s;
            if (errno != EINPROGRESS) {
                last = detail::last_error();
                continue;
            }
            switch (detail::wait_for(s.get(), POLLOUT, cancel_fd, until, op)) {
            case detail::ready::cancelled:
                throw cancelled_error(op + ": cancelled");
            case detail::ready::expired:
                if (detail::passed(deadline)) throw cancelled_error(op + ": deadline passed");
                last = std::make_error_code(std::errc::timed_out);
                continue;
            case detail::ready::yes:
                break;
            }
            int err = 0;
            socklen_t len = sizeof err;
            if (::getsockopt(s.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
            if (err == 0) return s;
            last = std::error_code(err, std::generic_category());
        }
        throw network_error(op + ": connect", last);
    }

    static void send_all(int s, std::string_view b, const std::string& op, int cancel_fd, detail::limit deadline,
                         std::chrono::milliseconds read_timeout) {
#ifdef MSG_NOSIGNAL
        constexpr int flags = MSG_NOSIGNAL;
#else
        constexpr int flags = 0;
#endif
        while (!b.empty()) {
            ssize_t n = ::send(s, b.data(), b.size(), flags);
            if (n > 0) {
                b.remove_prefix(static_cast<std::size_t>(n));
                continue;
            }
            if (n < 0 && errno == EINTR) continue;
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                auto r = detail::wait_for(s, POLLOUT, cancel_fd, deadline, op);
                if (r == detail::ready::cancelled) throw cancelled_error(op + ": cancelled");
                if (r == detail::ready::expired) detail::expired(op, read_timeout);
                continue;
            }
            throw network_error(op + ": send", detail::last_error());
        }
    }

    /// Reads the answer byte. An answer already there when the call is
    /// cancelled is still taken: a grant that arrived is not lost.
    static unsigned char receive(int s, const std::string& op, int cancel_fd, detail::limit deadline,
                                 std::chrono::milliseconds read_timeout) {
        for (;;) {
            auto r = detail::wait_for(s, POLLIN, cancel_fd, deadline, op);
            unsigned char answer = 0;
            ssize_t n = ::recv(s, &answer, 1, 0);
            if (n == 1) return answer;
            if (n == 0) throw network_error(op + ": connection closed before the answer",
                                            std::make_error_code(std::errc::connection_reset));
            if (errno == EINTR) continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK) throw network_error(op + ": receive", detail::last_error());
            if (r == detail::ready::cancelled) throw cancelled_error(op + ": cancelled");
            if (r == detail::ready::expired) detail::expired(op, read_timeout);
        }
    }

    std::string address_, source_, host_, port_;
    std::chrono::milliseconds connect_timeout_, read_timeout_;
};

} // namespace lockingcenter

#endif // LOCKINGCENTER_CLIENT_HPP
