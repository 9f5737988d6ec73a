// Unit tests of the C++ client: the encoder and the answer table against
// clients/testdata/vectors.json, byte for byte, and the network path
// against a scripted server on 127.0.0.1.
//
// Usage: test_client [path/to/vectors.json]
#include "lockingcenter/client.hpp"
#include "json.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/time.h>

#include <condition_variable>
#include <fstream>
#include <functional>
#include <iostream>
#include <mutex>
#include <sstream>
#include <thread>

namespace lc = lockingcenter;

namespace {

struct test_failure : std::runtime_error {
    using std::runtime_error::runtime_error;
};

#define CHECK(cond, msg)                                                                          \
    do {                                                                                          \
        if (!(cond)) {                                                                            \
            std::ostringstream where_;                                                            \
            where_ << __FILE__ << ":" << __LINE__ << ": " << msg;                                  \
            throw test_failure(where_.str());                                                     \
        }                                                                                         \
    } while (0)

json::value vectors;

std::string unhex(const std::string& h) {
    if (h.size() % 2 != 0) throw test_failure("odd hex length");
    std::string out;
    for (std::size_t i = 0; i < h.size(); i += 2) out += static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16));
    return out;
}

/// The hex field name of v as bytes; an absent field is empty.
std::string bytes(const json::value& v, const std::string& name) {
    const json::value* f = v.find(name);
    return f == nullptr ? std::string() : unhex(f->str());
}

std::string hex(std::string_view b) {
    std::string out;
    char buf[3];
    for (unsigned char c : b) {
        std::snprintf(buf, sizeof buf, "%02x", c);
        out += buf;
    }
    return out;
}

lc::action action_of(const json::value& v) {
    return static_cast<lc::action>(vectors.at("actions").at(v.at("action").str()).num());
}

const json::array& list(const std::string& name) {
    const json::array& a = vectors.at(name).arr();
    CHECK(!a.empty(), "no " << name << " in the vector file");
    return a;
}

// ---- a scripted server ------------------------------------------------------

int listen_loopback(std::string& addr) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof sa;
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || ::listen(fd, 8) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0) {
        throw std::runtime_error("listen on 127.0.0.1 failed");
    }
    addr = "127.0.0.1:" + std::to_string(ntohs(sa.sin_port));
    return fd;
}

/// Length of the complete request at the start of b, or 0 while incomplete.
std::size_t request_len(const std::string& b) {
    if (b.empty()) return 0;
    auto a = static_cast<lc::action>(b[0]);
    std::size_t at = 1;
    auto field = [&] {
        if (b.size() < at + 1 || b.size() < at + 1 + static_cast<unsigned char>(b[at])) return false;
        at += 1 + static_cast<unsigned char>(b[at]);
        return true;
    };
    if (a != lc::action::reset_source && !field()) return 0;
    if ((a == lc::action::lock || a == lc::action::try_lock || a == lc::action::reset_source) && !field()) return 0;
    return at;
}

/// Serves `conns` connections, one request each, and answers them as told.
class fake_server {
public:
    enum class reply { answer, hang, close };

    fake_server(int conns, reply r, unsigned char answer = lc::answer_ok)
        : fake_server(std::vector<reply>(static_cast<std::size_t>(conns), r), answer, false) {}

    /// Serves one connection per entry of replies, the i-th as replies[i]
    /// says; with gated, answers wait until open().
    fake_server(std::vector<reply> replies, unsigned char answer, bool gated)
        : listener_(listen_loopback(addr_)), replies_(std::move(replies)), answer_(answer), gated_(gated) {
        thread_ = std::thread([this] { serve(); });
    }
    ~fake_server() {
        open();
        stop();
    }

    /// Lets a gated server answer.
    void open() {
        {
            std::lock_guard<std::mutex> l(mu_);
            open_ = true;
        }
        cond_.notify_all();
    }

    const std::string& addr() const { return addr_; }

    void wait_requests(std::size_t n) {
        std::unique_lock<std::mutex> l(mu_);
        cond_.wait(l, [&] { return got_.size() >= n; });
    }

    /// Joins the server; afterwards requests() and peer_closed() are final.
    /// Connections not yet made are refused, so a client that never
    /// connected cannot hang the test.
    void stop() {
        if (listener_ >= 0) ::shutdown(listener_, SHUT_RDWR);
        if (thread_.joinable()) thread_.join();
        if (listener_ >= 0) ::close(listener_);
        listener_ = -1;
    }

    const std::vector<std::string>& requests() const { return got_; }
    bool peer_closed() const { return peer_closed_; }

private:
    void serve() {
        for (reply r : replies_) {
            lc::detail::fd c(::accept(listener_, nullptr, nullptr));
            if (c.get() < 0) return;
            timeval limit{10, 0}; // a client that misbehaves fails its test rather than hanging it
            ::setsockopt(c.get(), SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
            std::string b;
            char buf[512];
            while (request_len(b) == 0) {
                ssize_t n = ::recv(c.get(), buf, sizeof buf, 0);
                if (n <= 0) break;
                b.append(buf, static_cast<std::size_t>(n));
            }
            {
                std::lock_guard<std::mutex> l(mu_);
                got_.push_back(b);
            }
            cond_.notify_all();
            if (r == reply::answer) {
                {
                    std::unique_lock<std::mutex> l(mu_);
                    cond_.wait(l, [&] { return !gated_ || open_; });
                }
                [[maybe_unused]] auto n = ::send(c.get(), &answer_, 1, 0);
            } else if (r == reply::hang) {
                char x;
                ssize_t n = ::recv(c.get(), &x, 1, 0);
                peer_closed_ = n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
            }
        }
    }

    std::string addr_;
    int listener_;
    std::vector<reply> replies_;
    unsigned char answer_;
    bool gated_;
    bool open_ = false; // guarded by mu_
    std::thread thread_;
    std::mutex mu_;
    std::condition_variable cond_;
    std::vector<std::string> got_;
    bool peer_closed_ = false;
};

/// Reports whether no connection reached the listener.
bool nothing_pending(int listener) {
    ::fcntl(listener, F_SETFL, ::fcntl(listener, F_GETFL) | O_NONBLOCK);
    lc::detail::fd c(::accept(listener, nullptr, nullptr));
    return c.get() < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

/// Runs the client call for a; "ok", "busy" or "failed".
std::string perform(const lc::client& c, lc::action a, const std::string& key, const std::string& source) {
    try {
        switch (a) {
        case lc::action::lock: c.lock(key); break;
        case lc::action::unlock: c.unlock(key); break;
        case lc::action::reset_key: c.reset_by_key(key); break;
        case lc::action::reset_source: c.reset_by_source(source); break;
        case lc::action::try_lock: return c.try_lock(key) ? "ok" : "busy";
        }
        return "ok";
    } catch (const lc::error&) {
        return "failed";
    }
}

// ---- tests -----------------------------------------------------------------

void encoder_matches_vectors() {
    bool seen[6] = {};
    for (const auto& v : list("requests")) {
        const std::string& name = v.at("name").str();
        lc::action a = action_of(v);
        CHECK(static_cast<int>(a) == static_cast<int>(v.at("action_byte").num()), name << ": action_byte");
        std::string got = lc::encode_request(a, bytes(v, "key_hex"), bytes(v, "source_hex"));
        CHECK(got == bytes(v, "request_hex"), name << ": encoded " << hex(got));
        seen[static_cast<int>(a)] = true;
    }
    for (int a = 1; a <= 5; a++) CHECK(seen[a], "no vector for action " << a);
}

void answers_match_vectors() {
    for (const auto& v : list("answers")) {
        lc::action a = action_of(v);
        std::string answer = bytes(v, "answer_hex");
        CHECK(answer.size() == 1, "answer_hex is not one byte");
        std::string got;
        try {
            got = lc::decode_answer(a, static_cast<unsigned char>(answer[0])) == lc::outcome::busy ? "busy" : "ok";
        } catch (const lc::error&) {
            got = "failed";
        }
        CHECK(got == v.at("result").str(), v.at("action").str() << " answer " << hex(answer) << ": got " << got);
    }
}

void client_sends_vector_bytes() {
    for (const auto& v : list("requests")) {
        std::string key = bytes(v, "key_hex"), source = bytes(v, "source_hex");
        fake_server srv(1, fake_server::reply::answer);
        lc::client c(srv.addr(), source);
        std::string got = perform(c, action_of(v), key, source);
        srv.stop();
        CHECK(got == "ok", v.at("name").str() << ": " << got);
        CHECK(srv.requests().size() == 1 && srv.requests()[0] == bytes(v, "request_hex"),
              v.at("name").str() << ": server received other bytes");
    }
}

void client_maps_answers() {
    for (const auto& v : list("answers")) {
        std::string answer = bytes(v, "answer_hex");
        fake_server srv(1, fake_server::reply::answer, static_cast<unsigned char>(answer[0]));
        lc::client c(srv.addr());
        std::string got = perform(c, action_of(v), "k", "");
        CHECK(got == v.at("result").str(), v.at("action").str() << " answer " << hex(answer) << ": got " << got);
    }
    fake_server srv(1, fake_server::reply::answer, lc::answer_failed);
    try {
        lc::client(srv.addr()).lock("k");
        CHECK(false, "'-' did not throw");
    } catch (const lc::failed_error&) {
    }
}

void invalid_keys_are_never_sent() {
    std::string addr;
    int listener = listen_loopback(addr);
    lc::client c(addr, "src");
    lc::canceller cancel;
    std::vector<std::function<void(const std::string&)>> calls = {
        [&](const std::string& k) { c.lock(k); },
        [&](const std::string& k) { c.lock(k, cancel); },
        [&](const std::string& k) { c.try_lock_for(k, std::chrono::seconds(1)); },
        [&](const std::string& k) { c.try_lock(k); },
        [&](const std::string& k) { c.unlock(k); },
        [&](const std::string& k) { c.wait(k); },
        [&](const std::string& k) { c.reset_by_key(k); },
        [&](const std::string& k) { lc::encode_request(lc::action::lock, k, ""); },
    };
    for (const auto& v : list("invalid_keys")) {
        std::string key = bytes(v, "key_hex");
        for (std::size_t i = 0; i < calls.size(); i++) {
            bool refused = false;
            try {
                calls[i](key);
            } catch (const lc::invalid_key_error&) {
                refused = true;
            }
            CHECK(refused, v.at("name").str() << ": call " << i << " did not refuse the key");
        }
    }
    bool clean = nothing_pending(listener);
    ::close(listener);
    CHECK(clean, "a connection reached the server");
}

void invalid_sources_are_never_sent() {
    std::string addr;
    int listener = listen_loopback(addr);
    lc::client c(addr);
    for (const auto& v : list("invalid_sources")) {
        std::string source = bytes(v, "source_hex");
        int refused = 0;
        try {
            lc::client other(addr, source);
        } catch (const lc::invalid_source_error&) {
            refused++;
        }
        try {
            c.reset_by_source(source);
        } catch (const lc::invalid_source_error&) {
            refused++;
        }
        try {
            lc::encode_request(lc::action::try_lock, "k", source);
        } catch (const lc::invalid_source_error&) {
            refused++;
        }
        CHECK(refused == 3, v.at("name").str() << ": only " << refused << " of 3 calls refused it");
    }
    bool clean = nothing_pending(listener);
    ::close(listener);
    CHECK(clean, "a connection reached the server");
}

void cancel_closes_connection() {
    fake_server srv(1, fake_server::reply::hang);
    lc::client c(srv.addr());
    lc::canceller cancel;
    std::string result;
    std::thread t([&] {
        try {
            c.lock("k", cancel);
            result = "granted";
        } catch (const lc::cancelled_error&) {
            result = "cancelled";
        } catch (const std::exception& e) {
            result = e.what();
        }
    });
    srv.wait_requests(1);
    CHECK(!cancel.cancelled(), "fresh canceller is cancelled");
    cancel.cancel();
    cancel.cancel();
    t.join();
    srv.stop();
    CHECK(result == "cancelled", "lock gave " << result);
    CHECK(srv.peer_closed(), "server did not see the connection close");
    CHECK(cancel.cancelled(), "canceller forgot it fired");

    std::string addr;
    int listener = listen_loopback(addr);
    bool refused = false;
    try {
        lc::client(addr).wait("k", cancel);
    } catch (const lc::cancelled_error&) {
        refused = true;
    }
    bool clean = nothing_pending(listener);
    ::close(listener);
    CHECK(refused && clean, "a fired canceller did not stop the call before it connected");
}

void deadline_closes_connection() {
    fake_server srv(1, fake_server::reply::hang);
    bool got = lc::client(srv.addr()).try_lock_for("k", std::chrono::milliseconds(50));
    srv.stop();
    CHECK(!got, "try_lock_for reported a grant");
    CHECK(srv.peer_closed(), "server did not see the connection close");
}

void timed_lock_past_deadline_is_try_lock() {
    for (unsigned char answer : {lc::answer_ok, lc::answer_busy}) {
        fake_server srv(1, fake_server::reply::answer, answer);
        bool got = lc::client(srv.addr()).try_lock_for("k", std::chrono::milliseconds(0));
        srv.stop();
        CHECK(got == (answer == lc::answer_ok), "answer " << answer << ": got " << got);
        CHECK(srv.requests().size() == 1 && srv.requests()[0] == std::string("\x05\x01k\x00", 4), "not a trylock");
    }
}

void wait_locks_then_unlocks() {
    fake_server srv(2, fake_server::reply::answer);
    lc::client(srv.addr(), "s").wait("key");
    srv.stop();
    CHECK(srv.requests().size() == 2, "requests: " << srv.requests().size());
    CHECK(srv.requests()[0] == std::string("\x01\x03key\x01s", 7), "first request is not lock");
    CHECK(srv.requests()[1] == std::string("\x02\x03key", 5), "second request is not unlock");
}

void closed_without_answer() {
    fake_server srv(1, fake_server::reply::close);
    bool failed = false;
    try {
        lc::client(srv.addr()).try_lock("k");
    } catch (const lc::network_error&) {
        failed = true;
    }
    CHECK(failed, "no network_error");
}

void refused_connection_is_a_failure() {
    std::string addr;
    ::close(listen_loopback(addr));
    try {
        lc::client(addr).try_lock("k");
        CHECK(false, "try_lock against a closed port returned");
    } catch (const lc::network_error& e) {
        CHECK(e.code() == std::errc::connection_refused, "code " << e.code().message());
    }
}

/// Whether e is the read timeout of a 50 ms client.
bool is_read_timeout(const lc::network_error& e) {
    return e.code() == std::errc::timed_out && std::string(e.what()).find("no answer within 50 ms") != std::string::npos;
}

void read_timeout_ends_calls_that_do_not_wait() {
    // The server gives up after 10 s and closes: without a read timeout
    // the calls fail with connection_reset instead.
    std::pair<const char*, std::function<void(const lc::client&)>> calls[] = {
        {"try_lock", [](const lc::client& c) { c.try_lock("k"); }},
        {"unlock", [](const lc::client& c) { c.unlock("k"); }},
        {"reset_by_key", [](const lc::client& c) { c.reset_by_key("k"); }},
        {"reset_by_source", [](const lc::client& c) { c.reset_by_source("s"); }},
    };
    for (auto& [name, call] : calls) {
        fake_server srv(1, fake_server::reply::hang);
        lc::client c(srv.addr(), "s", lc::default_connect_timeout, std::chrono::milliseconds(50));
        try {
            call(c);
            CHECK(false, name << " returned");
        } catch (const lc::network_error& e) {
            CHECK(is_read_timeout(e), name << ": " << e.what());
        }
        srv.stop();
        CHECK(srv.peer_closed(), name << ": server did not see the connection close");
    }
}

void read_timeout_ends_the_release_of_wait() {
    // The lock is granted at once; the unlock after it is never answered.
    fake_server srv({fake_server::reply::answer, fake_server::reply::hang}, lc::answer_ok, false);
    lc::client c(srv.addr(), "s", lc::default_connect_timeout, std::chrono::milliseconds(50));
    try {
        c.wait("k");
        CHECK(false, "wait returned");
    } catch (const lc::network_error& e) {
        CHECK(is_read_timeout(e) && std::string(e.what()).rfind("unlock", 0) == 0, "wait: " << e.what());
    }
}

void lock_has_no_read_timeout() {
    fake_server srv({fake_server::reply::answer}, lc::answer_ok, true);
    lc::client c(srv.addr(), "s", lc::default_connect_timeout, std::chrono::milliseconds(10));
    std::string result;
    std::thread t([&] {
        try {
            c.lock("k");
            result = "granted";
        } catch (const std::exception& e) {
            result = e.what();
        }
    });
    srv.wait_requests(1);
    std::this_thread::sleep_for(std::chrono::milliseconds(500)); // fifty read timeouts
    srv.open();
    t.join();
    CHECK(result == "granted", "lock gave " << result);
}

void addresses() {
    for (const char* ok : {"localhost:22119", "127.0.0.1:1", "[::1]:22119", ":22119"}) {
        lc::client c(ok);
        CHECK(c.address() == ok, ok);
    }
    for (const char* bad : {"localhost", "localhost:", "localhost:0", "localhost:65536", "localhost:12x", "::1:22119",
                            "[::1:22119", "localhost:99999999999999999999"}) {
        bool refused = false;
        try {
            lc::client c(bad);
        } catch (const std::invalid_argument&) {
            refused = true;
        }
        CHECK(refused, bad << " accepted");
    }
}

} // namespace

int main(int argc, char** argv) {
    std::string path = argc > 1 ? argv[1] : "../testdata/vectors.json";
    try {
        std::ifstream in(path, std::ios::binary);
        if (!in) throw std::runtime_error("cannot open " + path);
        std::stringstream text;
        text << in.rdbuf();
        vectors = json::parse(text.str());
    } catch (const std::exception& e) {
        std::cout << "FAIL load: " << e.what() << "\n0 passed, 1 failed" << std::endl;
        return 1;
    }
    std::pair<const char*, void (*)()> tests[] = {
        {"encoder_matches_vectors", encoder_matches_vectors},
        {"answers_match_vectors", answers_match_vectors},
        {"client_sends_vector_bytes", client_sends_vector_bytes},
        {"client_maps_answers", client_maps_answers},
        {"invalid_keys_are_never_sent", invalid_keys_are_never_sent},
        {"invalid_sources_are_never_sent", invalid_sources_are_never_sent},
        {"cancel_closes_connection", cancel_closes_connection},
        {"deadline_closes_connection", deadline_closes_connection},
        {"timed_lock_past_deadline_is_try_lock", timed_lock_past_deadline_is_try_lock},
        {"wait_locks_then_unlocks", wait_locks_then_unlocks},
        {"closed_without_answer", closed_without_answer},
        {"read_timeout_ends_calls_that_do_not_wait", read_timeout_ends_calls_that_do_not_wait},
        {"read_timeout_ends_the_release_of_wait", read_timeout_ends_the_release_of_wait},
        {"lock_has_no_read_timeout", lock_has_no_read_timeout},
        {"refused_connection_is_a_failure", refused_connection_is_a_failure},
        {"addresses", addresses},
    };
    int passed = 0, failed = 0;
    for (auto& [name, fn] : tests) {
        try {
            fn();
            passed++;
            std::cout << "ok   " << name << std::endl;
        } catch (const std::exception& e) {
            failed++;
            std::cout << "FAIL " << name << ": " << e.what() << std::endl;
        }
    }
    std::cout << passed << " passed, " << failed << " failed" << std::endl;
    return failed == 0 ? 0 : 1;
}
