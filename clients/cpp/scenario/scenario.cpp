// scenario.cpp - the live conformance scenario of the C++ client. It runs
// against a server the harness started and prints one line per scenario,
// "ok <id>" or "FAIL <id>: <reason>".
//
// Environment: LC_ADDR (mutex port), LC_MANAGER_ADDR, LC_DEAD_ADDR (nothing
// listens there), LC_SILENT_ADDR (accepts and never answers), LC_PROBE
// (helper that inspects the server).
#include "lockingcenter/client.hpp"

#include <sys/wait.h>

#include <condition_variable>
#include <cstdlib>
#include <functional>
#include <future>
#include <iostream>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace lc = lockingcenter;
using namespace std::chrono_literals;

namespace {

std::string addr, manager_addr, dead_addr, silent_addr, probe;

/// The read timeout of silent-server-times-out, and the bound each call
/// must return well within.
constexpr std::chrono::milliseconds silent_timeout = 1s;
constexpr std::chrono::milliseconds silent_bound = 10 * silent_timeout;

struct scenario_failure : std::runtime_error {
    using std::runtime_error::runtime_error;
};

[[noreturn]] void fail(const std::string& why) { throw scenario_failure(why); }

std::string quote(const std::string& s) {
    std::string out = "'";
    for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
}

/// Runs the probe with args; returns its exit code and first output line.
std::pair<int, std::string> run_probe(const std::vector<std::string>& args) {
    std::string cmd = quote(probe);
    for (const auto& a : args) cmd += " " + quote(a);
    FILE* p = ::popen(cmd.c_str(), "r");
    if (p == nullptr) fail("cannot run the probe");
    std::string out;
    char buf[256];
    while (std::fgets(buf, sizeof buf, p) != nullptr) out += buf;
    int status = ::pclose(p);
    out = out.substr(0, out.find('\n'));
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

/// Waits until key has exactly n parked waiters.
void await_waiters(const std::string& key, int n) {
    auto [rc, out] = run_probe({"waiters", manager_addr, key, std::to_string(n)});
    if (rc != 0) fail("key " + key + " never had " + std::to_string(n) + " waiter(s) (probe exit " + std::to_string(rc) + ")");
}

/// Fails unless the holder of key is want ("free" when nobody holds it).
void expect_holder(std::string_view key, const std::string& want) {
    std::string hex;
    char buf[3];
    for (unsigned char c : key) {
        std::snprintf(buf, sizeof buf, "%02x", c);
        hex += buf;
    }
    auto [rc, out] = run_probe({"holder", manager_addr, hex});
    if (rc != 0) fail("probe holder exit " + std::to_string(rc));
    if (out != want) fail("holder of " + hex + " is " + out + ", want " + want);
}

/// A lock taken on its own thread. Its outcome is "granted", "cancelled",
/// "failed: ..." or another error's text.
class waiter {
public:
    waiter(const lc::client& c, std::string key, std::function<void()> on_grant = {},
           const lc::canceller* cancel = nullptr)
        : key_(std::move(key)), thread_([this, &c, on_grant, cancel] {
              std::string r;
              try {
                  cancel != nullptr ? c.lock(key_, *cancel) : c.lock(key_);
                  r = "granted";
                  if (on_grant) on_grant();
              } catch (const lc::cancelled_error&) {
                  r = "cancelled";
              } catch (const lc::failed_error& e) {
                  r = std::string("failed: ") + e.what();
              } catch (const std::exception& e) {
                  r = e.what();
              }
              std::lock_guard<std::mutex> l(mu_);
              result_ = r;
              done_.notify_all();
          }) {}

    waiter(const waiter&) = delete;
    waiter& operator=(const waiter&) = delete;

    /// Gives the thread 10 s to finish by itself. Otherwise (or at once
    /// when reset_now) resets the key until the parked lock is granted, so
    /// no thread is left behind, and reports false.
    bool settle(const lc::client& c, bool reset_now) {
        if (!thread_.joinable()) return true; // settled before
        std::unique_lock<std::mutex> l(mu_);
        bool on_time = reset_now || done_.wait_for(l, 10s, [&] { return !result_.empty(); });
        while (result_.empty()) {
            l.unlock();
            try {
                c.reset_by_key(key_);
            } catch (const std::exception&) {
                // the next round tries again
            }
            l.lock();
            done_.wait_for(l, 1s, [&] { return !result_.empty(); });
        }
        l.unlock();
        thread_.join();
        return on_time;
    }

    /// settle() for a scenario going well: throws when the thread hangs.
    const std::string& result(const lc::client& c) {
        if (!settle(c, false)) fail("a waiter on " + key_ + " did not return within 10 s");
        return result_;
    }

    ~waiter() {
        if (thread_.joinable()) thread_.join();
    }

private:
    std::string key_;
    std::mutex mu_;
    std::condition_variable done_;
    std::string result_;
    std::thread thread_;
};

/// Runs body; whatever happens, every waiter in ws is settled and key is
/// released by c.
void guarded(const lc::client& c, const std::string& key, std::vector<std::unique_ptr<waiter>>& ws,
             const std::function<void()>& body) {
    try {
        body();
    } catch (...) {
        for (auto& w : ws) w->settle(c, true);
        try {
            c.unlock(key);
        } catch (const std::exception&) {
        }
        throw;
    }
    c.unlock(key);
}

// ---- scenarios ---------------------------------------------------------------

void lock_unlock() {
    lc::client c(addr, "cpp-one");
    c.lock("cpp/lock-unlock");
    c.unlock("cpp/lock-unlock");
    if (!c.try_lock("cpp/lock-unlock")) fail("trylock after unlock was busy");
    c.unlock("cpp/lock-unlock");
}

void trylock_busy() {
    lc::client a(addr, "cpp-a"), b(addr, "cpp-b");
    a.lock("cpp/trylock-busy");
    bool got = true;
    std::string err;
    try {
        got = b.try_lock("cpp/trylock-busy");
    } catch (const std::exception& e) {
        err = e.what();
    }
    a.unlock("cpp/trylock-busy");
    if (!err.empty()) fail("trylock of a held key failed: " + err);
    if (got) fail("trylock of a held key acquired it");
}

void fifo_three() {
    const std::string k = "cpp/fifo-three";
    lc::client holder(addr, "cpp-holder");
    std::vector<lc::client> clients;
    for (int i = 1; i <= 3; i++) clients.emplace_back(addr, "cpp-w" + std::to_string(i));
    std::mutex mu;
    std::vector<int> order;
    std::vector<std::unique_ptr<waiter>> ws;
    holder.lock(k);
    guarded(holder, k, ws, [&] {
        for (int i = 0; i < 3; i++) {
            const lc::client& c = clients[static_cast<std::size_t>(i)];
            ws.push_back(std::make_unique<waiter>(c, k, [&, i] {
                {
                    std::lock_guard<std::mutex> l(mu);
                    order.push_back(i + 1);
                }
                c.unlock(k);
            }));
            await_waiters(k, i + 1);
        }
        holder.unlock(k);
        for (auto& w : ws) {
            const std::string& r = w->result(holder);
            if (r != "granted") fail("waiter: " + r);
        }
        if (order != std::vector<int>{1, 2, 3}) {
            std::string got;
            for (int n : order) got += (got.empty() ? "" : ",") + std::to_string(n);
            fail("granted in order " + got + ", want 1,2,3");
        }
    });
}

void wait_holds_nothing() {
    lc::client c(addr, "cpp-wait");
    c.wait("cpp/wait-holds-nothing");
    if (!c.try_lock("cpp/wait-holds-nothing")) fail("key still held after wait");
    c.unlock("cpp/wait-holds-nothing");
}

void reset_key() {
    const std::string k = "cpp/reset-key";
    lc::client holder(addr, "cpp-holder"), other(addr, "cpp-waiter");
    std::vector<std::unique_ptr<waiter>> ws;
    holder.lock(k);
    guarded(holder, k, ws, [&] {
        ws.push_back(std::make_unique<waiter>(other, k));
        await_waiters(k, 1);
        holder.reset_by_key(k);
        const std::string& r = ws[0]->result(holder);
        if (r != "granted") fail("waiter after reset: " + r);
        expect_holder(k, "cpp-waiter");
    });
}

void reset_source_withdraws() {
    const std::string k = "cpp/reset-source-withdraws";
    lc::client s1(addr, "cpp-s1"), s2(addr, "cpp-s2");
    std::vector<std::unique_ptr<waiter>> ws;
    s1.lock(k);
    guarded(s1, k, ws, [&] {
        ws.push_back(std::make_unique<waiter>(s2, k, [&] { s2.unlock(k); }));
        await_waiters(k, 1);
        s1.reset_by_source("cpp-s2");
        const std::string& r = ws[0]->result(s1);
        if (r.rfind("failed: ", 0) != 0) fail("withdrawn lock gave " + r + ", want failed");
        expect_holder(k, "cpp-s1");
    });
}

void key_127_ok_128_refused() {
    std::string key = "cpp/key-127/" + std::string(128 - 12, 'k');
    lc::client c(addr, "cpp-long"), dead(dead_addr, "cpp-long");
    c.lock(std::string_view(key).substr(0, 127));
    c.unlock(std::string_view(key).substr(0, 127));
    try {
        dead.lock(key);
    } catch (const lc::invalid_key_error&) {
        return;
    } catch (const std::exception& e) {
        fail(std::string("128-byte key gave ") + e.what() + ", want invalid key");
    }
    fail("128-byte key was locked");
}

void binary_key() {
    const std::string_view key("\x00\xff\x80" "a", 4);
    lc::client c(addr, "cpp-binary");
    c.lock(key);
    try {
        expect_holder(key, "cpp-binary");
    } catch (...) {
        c.unlock(key);
        throw;
    }
    c.unlock(key);
    expect_holder(key, "free");
}

void refused_connection() {
    lc::client c(dead_addr, "cpp-dead");
    try {
        c.lock("cpp/refused");
        fail("lock against nothing succeeded");
    } catch (const lc::network_error&) {
    }
    try {
        bool got = c.try_lock("cpp/refused");
        fail(std::string("trylock against nothing gave ") + (got ? "acquired" : "busy"));
    } catch (const lc::network_error&) {
    }
}

void cancel_withdraws() {
    const std::string k = "cpp/cancel-withdraws";
    lc::client holder(addr, "cpp-holder"), a(addr, "cpp-a"), b(addr, "cpp-b");
    lc::canceller cancel;
    std::vector<std::unique_ptr<waiter>> ws;
    holder.lock(k);
    guarded(holder, k, ws, [&] {
        ws.push_back(std::make_unique<waiter>(a, k, nullptr, &cancel));
        await_waiters(k, 1);
        cancel.cancel();
        const std::string& ra = ws[0]->result(holder);
        if (ra != "cancelled") fail("cancelled lock gave " + ra);
        await_waiters(k, 0);
        ws.push_back(std::make_unique<waiter>(b, k));
        await_waiters(k, 1);
        holder.unlock(k);
        const std::string& rb = ws[1]->result(holder);
        if (rb != "granted") fail("second waiter: " + rb);
        expect_holder(k, "cpp-b");
    });
}

void silent_server_times_out() {
    const lc::client c(silent_addr, "cpp-silent", lc::default_connect_timeout, silent_timeout);
    const std::string k = "cpp/silent";
    // Each call runs on a thread of its own with its own copy of the
    // client: one that never returns is left behind when the scenario fails.
    // A call returns false for busy, true for any other success.
    std::pair<const char*, std::function<bool(const lc::client&)>> calls[] = {
        {"try_lock", [k](const lc::client& cl) { return cl.try_lock(k); }},
        {"unlock", [k](const lc::client& cl) { cl.unlock(k); return true; }},
        {"reset_by_key", [k](const lc::client& cl) { cl.reset_by_key(k); return true; }},
        {"reset_by_source", [](const lc::client& cl) { cl.reset_by_source("cpp-silent"); return true; }},
    };
    for (auto& [name, call] : calls) {
        auto done = std::make_shared<std::promise<std::string>>();
        std::future<std::string> result = done->get_future();
        auto start = std::chrono::steady_clock::now();
        std::thread([c, call = call, done] {
            try {
                done->set_value(call(c) ? "succeeded" : "reported busy");
            } catch (const lc::network_error& e) {
                done->set_value(e.code() == std::errc::timed_out ? "" : e.what());
            } catch (const std::exception& e) {
                done->set_value(e.what());
            }
        }).detach();
        if (result.wait_for(silent_bound) != std::future_status::ready) {
            fail(std::string(name) + " at a silent server did not return within " + std::to_string(silent_bound.count()) + " ms");
        }
        auto took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
        std::string got = result.get();
        if (!got.empty()) fail(std::string(name) + " at a silent server: " + got + ", want the read timeout");
        if (took >= silent_bound) {
            fail(std::string(name) + " at a silent server took " + std::to_string(took.count()) + " ms, want well under " +
                 std::to_string(silent_bound.count()));
        }
    }
}

} // namespace

int main() {
    std::pair<std::string*, const char*> env[] = {
        {&addr, "LC_ADDR"}, {&manager_addr, "LC_MANAGER_ADDR"}, {&dead_addr, "LC_DEAD_ADDR"},
        {&silent_addr, "LC_SILENT_ADDR"}, {&probe, "LC_PROBE"}};
    for (auto [var, name] : env) {
        const char* v = std::getenv(name);
        if (v == nullptr) {
            std::cerr << "scenario: " << name << " must be set\n";
            return 2;
        }
        *var = v;
    }
    std::pair<const char*, void (*)()> scenarios[] = {
        {"lock-unlock", lock_unlock},
        {"trylock-busy", trylock_busy},
        {"fifo-three", fifo_three},
        {"wait-holds-nothing", wait_holds_nothing},
        {"reset-key", reset_key},
        {"reset-source-withdraws", reset_source_withdraws},
        {"key-127-ok-128-refused", key_127_ok_128_refused},
        {"binary-key", binary_key},
        {"refused-connection", refused_connection},
        {"cancel-withdraws", cancel_withdraws},
        {"silent-server-times-out", silent_server_times_out},
    };
    int failures = 0;
    for (auto& [id, run] : scenarios) {
        try {
            run();
            std::cout << "ok " << id << std::endl;
        } catch (const std::exception& e) {
            failures++;
            std::cout << "FAIL " << id << ": " << e.what() << std::endl;
        }
    }
    return failures == 0 ? 0 : 1;
}
