using System;
using System.Collections.Generic;
using System.Globalization;
using System.Text;

namespace LockingCenter.Tests
{
    /// <summary>
    /// A small, strict JSON reader for the tests (netstandard2.0 has none).
    /// Objects become Dictionary&lt;string, object&gt;, arrays List&lt;object&gt;,
    /// numbers double, and the rest string, bool or null.
    /// </summary>
    static class MiniJson
    {
        public static object Parse(string text)
        {
            int at = 0;
            object value = Value(text, ref at, 0);
            Space(text, ref at);
            if (at != text.Length) throw Error("data after the document", at);
            return value;
        }

        static FormatException Error(string what, int at) => new FormatException("json: " + what + " at offset " + at);

        static void Space(string s, ref int at)
        {
            while (at < s.Length && (s[at] == ' ' || s[at] == '\t' || s[at] == '\n' || s[at] == '\r')) at++;
        }

        static bool Eat(string s, ref int at, char c)
        {
            Space(s, ref at);
            if (at < s.Length && s[at] == c)
            {
                at++;
                return true;
            }
            return false;
        }

        static object Value(string s, ref int at, int depth)
        {
            if (depth > 64) throw Error("nested too deeply", at);
            Space(s, ref at);
            if (at >= s.Length) throw Error("unexpected end", at);
            switch (s[at])
            {
                case '{': return Object(s, ref at, depth);
                case '[': return Array(s, ref at, depth);
                case '"': return String(s, ref at);
                case 't': return Word(s, ref at, "true", true);
                case 'f': return Word(s, ref at, "false", false);
                case 'n': return Word(s, ref at, "null", null);
                default: return Number(s, ref at);
            }
        }

        static object Word(string s, ref int at, string word, object value)
        {
            if (string.CompareOrdinal(s, at, word, 0, word.Length) != 0) throw Error("unknown literal", at);
            at += word.Length;
            return value;
        }

        static Dictionary<string, object> Object(string s, ref int at, int depth)
        {
            var o = new Dictionary<string, object>();
            at++;
            if (Eat(s, ref at, '}')) return o;
            do
            {
                Space(s, ref at);
                if (at >= s.Length || s[at] != '"') throw Error("expected member name", at);
                string name = String(s, ref at);
                if (!Eat(s, ref at, ':')) throw Error("expected ':'", at);
                o[name] = Value(s, ref at, depth + 1);
            } while (Eat(s, ref at, ','));
            if (!Eat(s, ref at, '}')) throw Error("expected ',' or '}'", at);
            return o;
        }

        static List<object> Array(string s, ref int at, int depth)
        {
            var a = new List<object>();
            at++;
            if (Eat(s, ref at, ']')) return a;
            do a.Add(Value(s, ref at, depth + 1));
            while (Eat(s, ref at, ','));
            if (!Eat(s, ref at, ']')) throw Error("expected ',' or ']'", at);
            return a;
        }

        static double Number(string s, ref int at)
        {
            int start = at;
            if (at < s.Length && s[at] == '-') at++;
            if (at < s.Length && s[at] == '0') at++;
            else Digits(s, ref at);
            if (at < s.Length && s[at] == '.')
            {
                at++;
                Digits(s, ref at);
            }
            if (at < s.Length && (s[at] == 'e' || s[at] == 'E'))
            {
                at++;
                if (at < s.Length && (s[at] == '+' || s[at] == '-')) at++;
                Digits(s, ref at);
            }
            return double.Parse(s.Substring(start, at - start), NumberStyles.Float, CultureInfo.InvariantCulture);
        }

        static void Digits(string s, ref int at)
        {
            int start = at;
            while (at < s.Length && s[at] >= '0' && s[at] <= '9') at++;
            if (at == start) throw Error("bad number", at);
        }

        static string String(string s, ref int at)
        {
            at++; // opening quote
            var b = new StringBuilder();
            while (true)
            {
                if (at >= s.Length) throw Error("unterminated string", at);
                char c = s[at++];
                if (c == '"') return b.ToString();
                if (c < 0x20) throw Error("control character in string", at);
                if (c != '\\')
                {
                    b.Append(c);
                    continue;
                }
                if (at >= s.Length) throw Error("unterminated string", at);
                char e = s[at++];
                switch (e)
                {
                    case '"': case '\\': case '/': b.Append(e); break;
                    case 'b': b.Append('\b'); break;
                    case 'f': b.Append('\f'); break;
                    case 'n': b.Append('\n'); break;
                    case 'r': b.Append('\r'); break;
                    case 't': b.Append('\t'); break;
                    case 'u':
                        if (at + 4 > s.Length || !int.TryParse(s.Substring(at, 4), NumberStyles.AllowHexSpecifier, CultureInfo.InvariantCulture, out int cp))
                        {
                            throw Error("bad \\u escape", at);
                        }
                        at += 4;
                        b.Append((char)cp); // surrogate pairs arrive as two escapes, as in UTF-16
                        break;
                    default: throw Error("bad escape", at);
                }
            }
        }
    }
}
