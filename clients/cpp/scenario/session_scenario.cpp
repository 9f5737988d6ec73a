// session_scenario.cpp - the session scenarios of clients/conformance/SESSIONS.md
// for the C++ client, in their order: one line per scenario on stdout,
// "ok <id>" or "FAIL <id>: <reason>"; chatter on stderr.
//
//   session_scenario [ID...]              every scenario, or those named
//   session_scenario hold ADDR TTL_MS DELAY_MS KEY...
//                                          (s-kill-client's child: holds the keys,
//                                          prints "held", waits to be killed)
//
// Each scenario reads only the variables it needs. Exits 1 when one failed.
#include <lockingcenter/session.hpp>

#include "proc.h"
#include "scenarios.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <future>
#include <iostream>
#include <mutex>
#include <random>
#include <shared_mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

namespace lc = lockingcenter;
using namespace std::chrono_literals;
using clk = std::chrono::steady_clock;

namespace {

struct scenario_error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

std::string run_id;
std::string self;

template <class... A>
std::string str(const A&... a) {
    std::ostringstream o;
    (o << ... << a);
    return o.str();
}

[[noreturn]] void fail(const std::string& why) { throw scenario_error(why); }

void log(const std::string& m) { std::cerr << "  " << m << std::endl; }

std::string env(const char* name) {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') fail(str(name, " is not set"));
    return v;
}

std::string key(const std::string& name) { return "cpp/" + name + "/" + run_id; }

long long ms_since(clk::time_point t) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(clk::now() - t).count();
}

lc::session open(const std::string& addr, const std::string& name, std::chrono::milliseconds ttl = 0ms) {
    lc::session_options o;
    o.name = name;
    o.ttl = ttl;
    o.read_timeout = 5s;
    return lc::session(addr, o);
}

template <class... A>
std::string probe(const A&... args) {
    char out[4096];
    if (run_probe(out, sizeof out, std::string(args).c_str()..., static_cast<char*>(nullptr)) != 0)
        fail(str("probe ", (std::string(args) + " ")..., ": ", out));
    return out;
}

void waiters(const std::string& manager, const std::string& k, int n) { probe("waiters", manager, k, std::to_string(n)); }

std::vector<std::string> holders(const std::string& manager, const std::string& k) {
    std::vector<std::string> lines;
    std::istringstream in(probe("holders", manager, k));
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    return lines;
}

void expect_held(const std::string& manager, const std::string& k, std::uint64_t token) {
    auto h = holders(manager, k);
    if (h.size() != 1 || std::stoull(h[0]) != token)
        fail(str("holders of ", k, ": ", h.size(), " lines, the first '", h.empty() ? "" : h[0], "', want ", token));
}

/// An acquire on a thread of its own: get() waits for it, bounded.
struct background {
    std::future<lc::lock> f;
    background(lc::session& s, std::string k, lc::acquire_options o = {})
        : f(std::async(std::launch::async, [&s, k, o] { return s.acquire(k, o); })) {}
    lc::lock get(std::chrono::milliseconds bound, const std::string& what) {
        if (f.wait_for(bound) != std::future_status::ready) fail(what + ": not granted in time");
        return f.get();
    }
};

struct single {
    std::string addr = env("LC_ADDR"), manager = env("LC_MANAGER_ADDR");
};

void s_acquire_release() {
    single w;
    auto s = open(w.addr, "cpp-ar");
    auto k = key("acquire-release");
    auto a = s.acquire(k);
    a.release();
    auto b = s.acquire(k);
    if (b.token() <= a.token()) fail(str("second token ", b.token(), " not above the first ", a.token()));
    b.release();
    b.release(); // again: no error
    // The standard lock types over a key.
    lc::key m{s, k};
    {
        std::scoped_lock g{m};
        if (m.token() <= b.token()) fail("the key's token is not above the last");
    }
    std::unique_lock u{m, std::defer_lock};
    if (!u.try_lock_for(1s)) fail("try_lock_for of a free key");
}

void s_try_busy() {
    single w;
    auto h = open(w.addr, "cpp-holder"), t = open(w.addr, "cpp-try");
    auto k = key("try-busy");
    auto l = h.acquire(k);
    if (t.try_acquire(k)) fail("try_acquire of a held key gave a lock");
    lc::key m{t, k};
    if (m.try_lock()) fail("key::try_lock of a held key gave true");
}

void s_wait_bound() {
    single w;
    auto h = open(w.addr, "cpp-holder"), o = open(w.addr, "cpp-waiter");
    auto k = key("wait-bound");
    auto l = h.acquire(k);
    auto start = clk::now();
    try {
        lc::acquire_options opt;
        opt.wait = 500ms;
        o.acquire(k, opt);
        fail("an acquire with a wait of 500 ms of a held key was granted");
    } catch (const lc::timeout_error& e) {
        if (e.status() != LC_ERR_TIMEOUT) fail(str("timeout without the server's code: ", e.what()));
    }
    auto took = ms_since(start);
    if (took < 450 || took >= 3000) fail(str("the wait bound of 500 ms took ", took, " ms"));
    waiters(w.manager, k, 0);
}

void s_cancel() {
    single w;
    auto h = open(w.addr, "cpp-holder"), b = open(w.addr, "cpp-cancel");
    auto k = key("cancel");
    auto held = h.acquire(k);
#ifdef LOCKINGCENTER_STOP_TOKEN
    std::stop_source stop;
    lc::acquire_options opt;
    opt.stop = stop.get_token();
#else
    lc::canceller c;
    lc::acquire_options opt;
    opt.cancel = &c;
#endif
    auto waiting = std::async(std::launch::async, [&] {
        try {
            b.acquire(k, opt);
            return std::string("granted");
        } catch (const lc::acquire_cancelled_error&) {
            return std::string("cancelled");
        } catch (const std::exception& e) {
            return std::string(e.what());
        }
    });
    waiters(w.manager, k, 1);
#ifdef LOCKINGCENTER_STOP_TOKEN
    stop.request_stop();
#else
    c.cancel();
#endif
    auto start = clk::now();
    if (waiting.wait_for(5s) != std::future_status::ready) fail("the cancelled acquire did not return");
    if (auto r = waiting.get(); r != "cancelled") fail("the cancelled acquire: " + r);
    waiters(w.manager, k, 0);
    if (ms_since(start) > 1000) fail(str("the queue emptied ", ms_since(start), " ms after the cancel, want 1 s"));
    background next{b, k};
    waiters(w.manager, k, 1);
    held.release();
    next.get(10s, "the next waiter");
}

void s_stale_release() {
    single w;
    auto h = open(w.addr, "cpp-holder"), o = open(w.addr, "cpp-other");
    auto k = key("stale");
    auto l = h.acquire(k);
    for (auto [who, s, token] : {std::tuple{"another session", &o, l.token()}, std::tuple{"a wrong token", &h, l.token() + 1}}) {
        try {
            s->release(k, token);
            fail(str("release by ", who, " was not refused"));
        } catch (const lc::stale_token_error&) {
        }
    }
    expect_held(w.manager, k, l.token());
    if (!l.held()) fail("the holder's lock counts lost");
    l.release();
}

void s_lease_expiry() {
    single w;
    auto s = open(w.addr, "cpp-lease"), o = open(w.addr, "cpp-after");
    auto k = key("lease");
    std::promise<lc::lost_reason> lost;
    auto lost_at = lost.get_future();
    lc::acquire_options opt;
    opt.lease = 500ms;
    opt.delay = 2000ms;
    opt.on_lost = [&lost](lc::lost_reason r) { lost.set_value(r); };
    auto start = clk::now();
    auto l = s.acquire(k, opt);
    if (lost_at.wait_for(2s) != std::future_status::ready) fail("a 500 ms lease not reported lost within 2 s");
    auto when = clk::now();
    log(str("lease lost after ", ms_since(start), " ms"));
    if (lost_at.get() != lc::lost_reason::lease_expired || l.lost() != lc::lost_reason::lease_expired)
        fail("the loss's reason is not lease expired");
#ifdef LOCKINGCENTER_STOP_TOKEN
    if (!l.lost_token().stop_requested()) fail("the lock's lost_token was not stopped");
#endif
    if (o.try_acquire(k)) fail("a try at once was granted: the key has no lock-delay");
    lc::acquire_options wait;
    wait.wait = 6s;
    auto after = o.acquire(k, wait);
    log(str("granted to the second session ", ms_since(when), " ms after the loss"));
    if (ms_since(when) > 5000) fail(str("granted ", ms_since(when), " ms after the loss, want within 5 s"));
}

int hold_main(int argc, char** argv) {
    if (argc < 6) return 2;
    lc::session_options o;
    o.name = "cpp-kill-child";
    o.ttl = std::chrono::milliseconds{std::atoi(argv[3])};
    lc::session s{argv[2], o};
    lc::acquire_options a;
    a.delay = std::chrono::milliseconds{std::atoi(argv[4])};
    std::vector<lc::lock> held;
    for (int i = 5; i < argc; i++) held.push_back(s.acquire(argv[i], a));
    std::cout << "held" << std::endl;
    for (;;) pause();
}

void s_kill_client() {
    single w;
    std::vector<std::string> keys{key("kill-0"), key("kill-1"), key("kill-2")};
    std::vector<char*> argv{self.data(), const_cast<char*>("hold"), w.addr.data(), const_cast<char*>("2000"),
                            const_cast<char*>("1000")};
    for (auto& k : keys) argv.push_back(k.data());
    argv.push_back(nullptr);
    child c;
    if (!child_start(&c, argv.data())) fail("cannot start the child");
    char line[64];
    if (!child_line(&c, line, sizeof line, 10000) || std::string(line) != "held") {
        child_wait(&c, 0);
        fail(str("the child said ", line));
    }
    ::kill(c.pid, SIGKILL);
    auto killed = clk::now();
    child_wait(&c, 5000);
    auto s = open(w.addr, "cpp-after-kill");
    std::this_thread::sleep_until(killed + 1s);
    for (auto& k : keys)
        if (holders(w.manager, k).empty()) fail(k + " free 1 s after the kill, before its TTL and lock-delay");
    for (auto& k : keys) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(killed + 5s - clk::now());
        if (!s.try_acquire_for(k, left)) fail(k + " not acquired by 5 s after the kill");
        log(str(k, " free ", ms_since(killed), " ms after the kill"));
    }
}

void s_resume() {
    single w;
    auto proxy = env("LC_PROXY_ADDR"), ctl = env("LC_PROXY_CTL");
    auto ka = key("resume-a"), kb = key("resume-b");
    auto s = open(proxy, "cpp-resume", 5s);
    auto o = open(w.addr, "cpp-b");
    auto a = s.acquire(ka);
    auto b_held = o.acquire(kb);
    background parked{s, kb};
    waiters(w.manager, kb, 1);
    probe("cut", ctl);
    b_held.release();
    auto b = parked.get(10s, "the parked acquire of B after the cut");
    expect_held(w.manager, ka, a.token());
    expect_held(w.manager, kb, b.token());
    if (!a.held()) fail("lock A lost over the cut");
}

/// The manager of the cluster's leader, among the nodes other than skip.
std::string leader_manager(int skip = -1) {
    std::vector<std::string> all, live;
    std::istringstream in(env("LC_CLUSTER_MANAGER"));
    for (std::string m; std::getline(in, m, ',');) all.push_back(m);
    std::string list;
    for (int i = 0; i < static_cast<int>(all.size()); i++)
        if (i != skip) {
            live.push_back(all[i]);
            list += (list.empty() ? "" : ",") + all[i];
        }
    auto idx = std::stoul(probe("leader", list));
    if (idx >= live.size()) fail("probe leader named no live node");
    return live[idx];
}

void s_leader_stop() {
    auto cluster = env("LC_CLUSTER");
    auto s = open(cluster, "cpp-ls", 3s);
    auto k = key("leader-stop");
    auto l = s.acquire(k);
    int stopped = std::stoi(probe("signal-leader", "STOP"));
    log(str("stopped node ", stopped));
    std::this_thread::sleep_for(6s);
    probe("signal-leader", "CONT");
    if (!s.alive()) fail(str("the session ended: ", lc_strerror(s.status())));
    if (!l.held()) fail("the lock was lost");
    expect_held(leader_manager(stopped), k, l.token());
    log("session on " + s.address());
}

void s_leader_kill() {
    auto cluster = env("LC_CLUSTER");
    auto s = open(cluster, "cpp-lk", 5s), o = open(cluster, "cpp-lk-2", 5s);
    auto k1 = key("leader-kill-1"), k2 = key("leader-kill-2");
    auto held = s.acquire(k1);
    auto other = o.acquire(k2);
    background parked{s, k2};
    waiters(leader_manager(), k2, 1);
    int killed = std::stoi(probe("signal-leader", "KILL"));
    log(str("killed node ", killed));
    expect_held(leader_manager(killed), k1, held.token());
    other.release();
    auto got = parked.get(15s, "the parked acquire after the failover");
    expect_held(leader_manager(killed), k2, got.token());
    if (!held.held()) fail("the held lock was lost");
}

void s_tls_token() {
    auto addr = env("LC_TLS_ADDR");
    if (!lc_tls_available()) fail("the C library was built without OpenSSL");
    lc::session_options o;
    o.name = "cpp-tls";
    o.tls = true;
    o.ca_file = env("LC_CA_FILE");
    o.token = env("LC_TOKEN");
    o.server_name = "localhost";
    {
        lc::session s{addr, o};
        s.acquire(key("tls")).release();
        try {
            s.acquire("outside/cpp");
            fail("a key outside cpp/ was granted");
        } catch (const lc::forbidden_error&) {
        }
    }
    o.token += "-wrong";
    try {
        lc::session bad{addr, o};
        fail("a wrong token opened a session");
    } catch (const lc::unauthenticated_error&) {
    }
}

void s_modes() {
    single w;
    auto a = open(w.addr, "cpp-m0"), b = open(w.addr, "cpp-m1"), c = open(w.addr, "cpp-m2");
    auto ks = key("shared"), kp = key("pool"), kr = key("reentrant"), kq = key("priority");
    {
        // Shared mode through std::shared_lock, on two sessions.
        lc::key ra{a, ks}, rb{b, ks};
        std::shared_lock r1{ra}, r2{rb};
        if (holders(w.manager, ks).size() != 2) fail("shared: not two holders");
    }
    lc::acquire_options pool;
    pool.limit = 2;
    {
        auto p1 = a.acquire(kp, pool), p2 = b.acquire(kp, pool);
        if (c.try_acquire(kp, pool)) fail("a third try of a semaphore of 2 was granted");
    }
    lc::acquire_options re;
    re.reentrant = true;
    re.owner = "job";
    auto x = a.acquire(kr, re);
    auto y = a.acquire(kr, re);
    if (x.token() != y.token() || y.count() != 2) fail(str("reentrant: tokens ", x.token(), " and ", y.token()));
    y.release();
    expect_held(w.manager, kr, x.token());
    x.release();
    auto h = a.acquire(kq);
    std::mutex mu;
    std::vector<std::string> order;
    auto take = [&](lc::session& s, std::string name, int prio) {
        lc::acquire_options o;
        o.priority = prio;
        auto l = s.acquire(kq, o);
        std::lock_guard g{mu};
        order.push_back(name);
    };
    auto low = std::async(std::launch::async, take, std::ref(b), "low", 1);
    waiters(w.manager, kq, 1);
    auto high = std::async(std::launch::async, take, std::ref(c), "high", 5);
    waiters(w.manager, kq, 2);
    h.release();
    for (auto* f : {&low, &high})
        if (f->wait_for(10s) != std::future_status::ready) fail("a priority waiter was not granted");
    low.get();
    high.get();
    if (order != std::vector<std::string>{"high", "low"}) fail("the higher priority was not granted first");
}

void s_note() {
    single w;
    std::string note = "nightly build 42 on ci-7, \xc3\xbc" "n\xc3\xaf" "code";
    auto s = open(w.addr, "cpp-note");
    auto k = key("note");
    lc::acquire_options o;
    o.note = note;
    auto l = s.acquire(k, o);
    auto h = holders(w.manager, k);
    auto want = str(l.token(), " ", s.id(), " ", note);
    if (h.size() != 1 || h[0] != want) fail(str("probe holders: '", h.empty() ? "" : h[0], "', want '", want, "'"));
}

void s_big_token() {
    auto s = open(env("LC_BIG_ADDR"), "cpp-big");
    auto k = key("big");
    auto l = s.acquire(k);
    if (l.token() <= (std::uint64_t{1} << 63)) fail(str("token ", l.token(), " is not above 2^63"));
    auto info = s.describe(k);
    if (info.holders.size() != 1 || info.holders[0].token != l.token()) fail("describe does not show the token");
    if (const char* m = std::getenv("LC_BIG_MANAGER"); m != nullptr && *m != '\0') expect_held(m, k, l.token());
    log(str("token ", l.token(), " (2^63 + ", l.token() - (std::uint64_t{1} << 63), ")"));
}

void s_silent_server() {
    lc::session_options o;
    o.name = "cpp-silent";
    o.read_timeout = 3s;
    auto start = clk::now();
    try {
        lc::session s{env("LC_SILENT_ADDR"), o};
        fail("a session opened at a silent server");
    } catch (const lc::timeout_error&) {
    }
    if (ms_since(start) > 10000) fail(str("the timeout took ", ms_since(start), " ms"));
}

void s_fifo_mixed() {
    single w;
    auto probe_bin = env("LC_PROBE");
    auto k = key("fifo-mixed");
    auto h = open(w.addr, "cpp-f0");
    std::vector<lc::session> mine;
    for (int i = 1; i <= 3; i++) mine.push_back(open(w.addr, str("cpp-f", i)));
    auto held = h.acquire(k);
    std::vector<std::future<std::uint64_t>> ours;
    std::vector<child> probes;
    std::uint64_t tokens[5] = {};
    struct reap { // the probes end however this scenario does
        std::vector<child>& p;
        ~reap() {
            for (auto& c : p) child_wait(&c, 10000);
        }
    } reaper{probes};
    for (int i = 0; i < 5; i++) {
        if (i % 2 == 0) {
            auto* s = &mine[static_cast<std::size_t>(i / 2)];
            ours.push_back(std::async(std::launch::async, [s, k] { return s->acquire(k).token(); }));
        } else {
            char* argv[] = {probe_bin.data(), const_cast<char*>("session-lock"), w.addr.data(), k.data(), nullptr};
            child c;
            if (!child_start(&c, argv)) fail("cannot start probe session-lock");
            probes.push_back(c);
        }
        waiters(w.manager, k, i + 1);
    }
    held.release();
    for (std::size_t i = 0; i < probes.size(); i++) {
        char line[128];
        if (!child_line(&probes[i], line, sizeof line, 15000) || std::string(line).rfind("granted ", 0) != 0)
            fail(str("probe session-lock said ", line));
        tokens[2 * i + 1] = std::stoull(line + 8);
        child_close_input(&probes[i]);
    }
    for (std::size_t i = 0; i < ours.size(); i++) {
        if (ours[i].wait_for(10s) != std::future_status::ready) fail("a C++ waiter was not granted");
        tokens[2 * i] = ours[i].get();
    }
    for (int i = 1; i < 5; i++)
        if (tokens[i] <= tokens[i - 1]) fail(str("waiter ", i, " was granted before waiter ", i - 1));
}

#define LC_ENTRY(id, fn) {id, fn},
const std::vector<std::pair<std::string, void (*)()>> scenarios = {LC_SESSION_SCENARIOS(LC_ENTRY)};
#undef LC_ENTRY

} // namespace

int main(int argc, char** argv) {
    if (argc > 1 && std::string(argv[1]) == "hold") return hold_main(argc, argv);
    std::signal(SIGPIPE, SIG_IGN);
    char exe[4096];
    ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
    self = n > 0 ? std::string(exe, static_cast<std::size_t>(n)) : argv[0];
    std::mt19937 rng{std::random_device{}()};
    run_id = str(std::hex, rng() & 0xffffff);
    std::vector<std::string> chosen(argv + 1, argv + argc);
    for (auto& c : chosen) {
        bool known = false;
        for (auto& [id, fn] : scenarios) known |= id == c;
        if (!known) {
            std::cerr << "session_scenario: unknown scenario " << c << "\n";
            return 2;
        }
    }
    int status = 0;
    for (auto& [id, fn] : scenarios) {
        if (!chosen.empty() && std::find(chosen.begin(), chosen.end(), id) == chosen.end()) continue;
        std::cerr << "== " << id << std::endl;
        auto start = clk::now();
        try {
            fn();
            std::cout << "ok " << id << std::endl;
        } catch (const std::exception& e) {
            std::string why = e.what();
            for (auto& ch : why)
                if (ch == '\n') ch = ' ';
            std::cout << "FAIL " << id << ": " << why << std::endl;
            status = 1;
        }
        log(str(ms_since(start) / 1000.0, " s"));
    }
    return status;
}
