// example.cpp - take a lock, do the work, release it.
//
//   g++ -std=c++17 -Iinclude examples/example.cpp -o example
//   ./example localhost:22119
#include <lockingcenter/client.hpp>

#include <chrono>
#include <iostream>

int main(int argc, char** argv) {
    const char* address = argc > 1 ? argv[1] : "localhost:22119";
    const std::string key = "orders/batch-7";
    try {
        lockingcenter::client client{address, "example-worker"};

        client.lock(key); // blocks until the key is ours
        std::cout << "holding " << key << "\n";
        // ... exclusive work ...
        client.unlock(key);

        // try_lock never queues: false means busy, which is not an error.
        if (client.try_lock(key)) {
            std::cout << "trylock " << key << ": acquired\n";
            client.unlock(key);
        } else {
            std::cout << "trylock " << key << ": busy\n";
        }

        // Wait at most two seconds; on timeout the request is withdrawn.
        if (client.try_lock_for(key, std::chrono::seconds(2))) client.unlock(key);
    } catch (const lockingcenter::error& e) { // server refused, or the network failed
        std::cerr << e.what() << "\n";
        return 1;
    }
    return 0;
}
