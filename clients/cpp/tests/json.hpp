// json.hpp - a small, strict JSON reader for the tests (the C++ standard
// library has none). json::parse reads a whole document into a json::value.
#ifndef LOCKINGCENTER_TEST_JSON_HPP
#define LOCKINGCENTER_TEST_JSON_HPP

#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

namespace json {

struct value;
using array = std::vector<value>;
using object = std::map<std::string, value>;

struct value {
    std::variant<std::nullptr_t, bool, double, std::string, std::shared_ptr<array>, std::shared_ptr<object>> v;

    bool is_string() const { return std::holds_alternative<std::string>(v); }
    const std::string& str() const { return std::get<std::string>(v); }
    double num() const { return std::get<double>(v); }
    const array& arr() const { return *std::get<std::shared_ptr<array>>(v); }
    const object& obj() const { return *std::get<std::shared_ptr<object>>(v); }

    /// The member name of an object, or nullptr when absent.
    const value* find(const std::string& name) const {
        const auto& o = obj();
        auto it = o.find(name);
        return it == o.end() ? nullptr : &it->second;
    }
    const value& at(const std::string& name) const {
        const value* m = find(name);
        if (m == nullptr) throw std::runtime_error("json: no member " + name);
        return *m;
    }
};

class parser {
public:
    explicit parser(const std::string& text) : s_(text) {}

    value document() {
        value v = parse(0);
        space();
        if (i_ != s_.size()) fail("data after the document");
        return v;
    }

private:
    [[noreturn]] void fail(const std::string& what) const {
        throw std::runtime_error("json: " + what + " at offset " + std::to_string(i_));
    }
    void space() {
        while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) i_++;
    }
    bool eat(char c) {
        space();
        if (i_ < s_.size() && s_[i_] == c) {
            i_++;
            return true;
        }
        return false;
    }
    void expect(char c) {
        if (!eat(c)) fail(std::string("expected '") + c + "'");
    }
    void word(const std::string& w) {
        if (s_.compare(i_, w.size(), w) != 0) fail("unknown literal");
        i_ += w.size();
    }

    value parse(int depth) {
        if (depth > 64) fail("nested too deeply");
        space();
        if (i_ >= s_.size()) fail("unexpected end");
        char c = s_[i_];
        if (c == '{') return parse_object(depth);
        if (c == '[') return parse_array(depth);
        if (c == '"') return value{string()};
        if (c == 't') return word("true"), value{true};
        if (c == 'f') return word("false"), value{false};
        if (c == 'n') return word("null"), value{nullptr};
        return value{number()};
    }

    value parse_object(int depth) {
        auto o = std::make_shared<object>();
        i_++;
        if (!eat('}')) {
            do {
                space();
                if (i_ >= s_.size() || s_[i_] != '"') fail("expected member name");
                std::string k = string();
                expect(':');
                (*o)[k] = parse(depth + 1);
            } while (eat(','));
            expect('}');
        }
        return value{o};
    }

    value parse_array(int depth) {
        auto a = std::make_shared<array>();
        i_++;
        if (!eat(']')) {
            do a->push_back(parse(depth + 1));
            while (eat(','));
            expect(']');
        }
        return value{a};
    }

    double number() {
        std::size_t start = i_;
        auto digits = [&] {
            std::size_t from = i_;
            while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') i_++;
            if (i_ == from) fail("bad number");
        };
        if (i_ < s_.size() && s_[i_] == '-') i_++;
        if (i_ < s_.size() && s_[i_] == '0') {
            i_++;
        } else {
            digits();
        }
        if (i_ < s_.size() && s_[i_] == '.') {
            i_++;
            digits();
        }
        if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
            i_++;
            if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) i_++;
            digits();
        }
        return std::stod(s_.substr(start, i_ - start));
    }

    std::uint32_t hex4() {
        if (i_ + 4 > s_.size()) fail("short \\u escape");
        std::uint32_t v = 0;
        for (int k = 0; k < 4; k++) {
            char c = s_[i_++];
            int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
            if (d < 0) fail("bad \\u escape");
            v = v * 16 + static_cast<std::uint32_t>(d);
        }
        return v;
    }

    static void utf8(std::string& out, std::uint32_t cp) {
        if (cp < 0x80) {
            out += static_cast<char>(cp);
        } else if (cp < 0x800) {
            out += static_cast<char>(0xc0 | (cp >> 6));
            out += static_cast<char>(0x80 | (cp & 0x3f));
        } else if (cp < 0x10000) {
            out += static_cast<char>(0xe0 | (cp >> 12));
            out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
            out += static_cast<char>(0x80 | (cp & 0x3f));
        } else {
            out += static_cast<char>(0xf0 | (cp >> 18));
            out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
            out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
            out += static_cast<char>(0x80 | (cp & 0x3f));
        }
    }

    std::string string() {
        i_++; // opening quote
        std::string out;
        for (;;) {
            if (i_ >= s_.size()) fail("unterminated string");
            unsigned char c = static_cast<unsigned char>(s_[i_++]);
            if (c == '"') return out;
            if (c < 0x20) fail("control character in string");
            if (c != '\\') {
                out += static_cast<char>(c);
                continue;
            }
            if (i_ >= s_.size()) fail("unterminated string");
            char e = s_[i_++];
            switch (e) {
            case '"': case '\\': case '/': out += e; break;
            case 'b': out += '\b'; break;
            case 'f': out += '\f'; break;
            case 'n': out += '\n'; break;
            case 'r': out += '\r'; break;
            case 't': out += '\t'; break;
            case 'u': {
                std::uint32_t cp = hex4();
                if (cp >= 0xdc00 && cp < 0xe000) fail("lone low surrogate");
                if (cp >= 0xd800 && cp < 0xdc00) {
                    if (s_.compare(i_, 2, "\\u") != 0) fail("lone high surrogate");
                    i_ += 2;
                    std::uint32_t lo = hex4();
                    if (lo < 0xdc00 || lo >= 0xe000) fail("bad surrogate pair");
                    cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                }
                utf8(out, cp);
                break;
            }
            default:
                fail("bad escape");
            }
        }
    }

    const std::string& s_;
    std::size_t i_ = 0;
};

inline value parse(const std::string& text) { return parser(text).document(); }

} // namespace json

#endif
