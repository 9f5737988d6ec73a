// session_example.cpp - a session: a key taken through std::scoped_lock, a
// lock with a lease whose loss is a callback, and a try that may be busy.
//
//   session_example [ADDRESSES]    default localhost:22119
#include <lockingcenter/session.hpp>

#include <iostream>
#include <mutex>

int main(int argc, char** argv) {
    using namespace std::chrono_literals;
    namespace lc = lockingcenter;
    try {
        lc::session_options so;
        so.name = "example-worker";
        so.ttl = 10s;
        lc::session s{argc > 1 ? argv[1] : "localhost:22119", so};

        lc::key batch{s, "orders/batch-7"};
        {
            std::scoped_lock guard{batch};   // a Lockable: blocks until the key is ours
            std::cout << "holding orders/batch-7, token " << batch.token() << "\n";
        }                                    // released here

        lc::acquire_options ao;
        ao.lease = 30s;                      // ends by itself unless renewed
        ao.note = "nightly export";          // shown to whoever lists the key
        ao.on_lost = [](lc::lost_reason) { std::cerr << "lost the export lock\n"; };
        lc::lock l = s.acquire("exports/nightly", ao);
        l.renew();
        l.release();

        if (auto maybe = s.try_acquire("orders/batch-7")) {
            std::cout << "got it again, token " << maybe->token() << "\n";
        } else {
            std::cout << "busy: someone else holds it\n";
        }
    } catch (const lc::error& e) {           // every failure, the server's message included
        std::cerr << e.what() << "\n";
        return 1;
    }
}
