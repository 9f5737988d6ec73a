// session_bench.cpp - acquire+release cycles per second through one shared
// session of the C++ client: N threads, each on its own key, through
// lockingcenter::key and std::scoped_lock, against the lcd at ADDRESS.
//
//   session_bench ADDRESS [THREADS=16] [SECONDS=5]
//
// Prints the cycles per second.
#include <lockingcenter/session.hpp>

#include <atomic>
#include <chrono>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
    namespace lc = lockingcenter;
    if (argc < 2) {
        std::cerr << "usage: session_bench ADDRESS [THREADS] [SECONDS]\n";
        return 2;
    }
    int threads = argc > 2 ? std::stoi(argv[2]) : 16;
    double seconds = argc > 3 ? std::stod(argv[3]) : 5;
    lc::session_options o;
    o.name = "bench-cpp";
    lc::session s{argv[1], o};
    std::atomic<bool> stop{false}, failed{false};
    std::atomic<long> cycles{0};
    std::vector<std::thread> ts;
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < threads; i++) {
        ts.emplace_back([&, i] {
            lc::key k{s, "cpp/bench/t" + std::to_string(i)};
            long n = 0;
            try {
                while (!stop.load()) {
                    std::scoped_lock g{k};
                    n++;
                }
            } catch (const lc::error& e) {
                std::cerr << "session_bench: " << e.what() << "\n";
                failed = true;
            }
            cycles += n;
        });
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    stop = true;
    for (auto& t : ts) t.join();
    std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    std::cout << static_cast<long>(static_cast<double>(cycles.load()) / took.count()) << "\n";
    return failed ? 1 : 0;
}
