using System;
using System.Collections.Generic;
using System.IO;
using System.Linq;
using System.Reflection;

namespace LockingCenter.Tests
{
    /// <summary>The session codec against clients/testdata/session-vectors.json, byte for byte, and against broken bytes.</summary>
    static class SessionCodecTests
    {
        static Dictionary<string, object> root;

        /// <summary>Loads the session vectors that sit beside the v1 file at vectorsPath.</summary>
        public static string VectorsPath { get; private set; }

        public static void Load(string vectorsPath)
        {
            VectorsPath = vectorsPath;
            string path = Path.Combine(Path.GetDirectoryName(Path.GetFullPath(vectorsPath)), "session-vectors.json");
            root = (Dictionary<string, object>)MiniJson.Parse(File.ReadAllText(path));
        }

        static List<Dictionary<string, object>> Frames()
        {
            var frames = ((List<object>)root["frames"]).Cast<Dictionary<string, object>>().ToList();
            Check.That(frames.Count > 0, "no frames in the session vector file");
            return frames;
        }

        static List<Field> FieldsOf(Dictionary<string, object> v) =>
            ((List<object>)v["fields"]).Cast<Dictionary<string, object>>()
                .Select(f => new Field((byte)(double)f["tag"], Vectors.Bytes(f, "value_hex"))).ToList();

        static byte[] FrameBytes(Dictionary<string, object> v) => Vectors.Bytes(v, "frame_hex");

        [Test]
        static void PrefaceIsTheFiles()
        {
            Check.That(Vectors.Hex(Wire.Preface) == (string)root["preface_hex"], "preface " + Vectors.Hex(Wire.Preface));
        }

        [Test]
        static void EncodesEveryVector()
        {
            foreach (var v in Frames())
            {
                byte[] got = Wire.Encode((byte)(double)v["type"], (ulong)(double)v["id"], FieldsOf(v));
                Check.That(Vectors.Hex(got) == Vectors.Hex(FrameBytes(v)), v["name"] + ": encoded " + Vectors.Hex(got));
            }
        }

        [Test]
        static void DecodesEveryVector()
        {
            foreach (var v in Frames())
            {
                byte[] b = FrameBytes(v);
                int size;
                Frame f = Wire.Decode(b, 0, b.Length, out size);
                string name = (string)v["name"];
                Check.That(f != null && size == b.Length, name + ": not decoded whole");
                Check.That(f.Type == (byte)(double)v["type"] && f.Id == (ulong)(double)v["id"], name + ": type or id");
                List<Field> want = FieldsOf(v);
                Check.That(f.List.Count == want.Count, name + ": " + f.List.Count + " fields, want " + want.Count);
                for (int i = 0; i < want.Count; i++)
                {
                    Check.That(f.List[i].Tag == want[i].Tag && f.List[i].Value.SequenceEqual(want[i].Value), name + ": field " + i);
                    if (Tag.IsList(want[i].Tag))
                    {
                        // A list item's own fields encode back to its value.
                        byte[] again = Wire.Encode(0, 0, f.List[i].Items.List).Skip(13).ToArray();
                        Check.That(again.SequenceEqual(want[i].Value), name + ": list item " + i + " re-encoded " + Vectors.Hex(again));
                    }
                }
                Check.That(DecodeWhole(b.Take(b.Length - 1).ToArray()) == null, name + ": a frame cut short decoded");
            }
        }

        [Test]
        static void TagsTypesAndCodesAreTheFiles()
        {
            foreach (var kv in (Dictionary<string, object>)root["tags"])
            {
                string pascal = string.Concat(kv.Key.Split('_').Select(w => char.ToUpperInvariant(w[0]) + w.Substring(1)));
                FieldInfo f = typeof(Tag).GetField(pascal);
                Check.That(f != null && (byte)f.GetValue(null) == (byte)(double)kv.Value, "tag " + kv.Key);
            }
            foreach (var kv in (Dictionary<string, object>)root["types"])
            {
                string pascal = char.ToUpperInvariant(kv.Key[0]) + kv.Key.Substring(1);
                FieldInfo f = typeof(FrameType).GetField(pascal);
                Check.That(f != null && (byte)f.GetValue(null) == (byte)(double)kv.Value, "type " + kv.Key);
            }
            foreach (var kv in (Dictionary<string, object>)root["codes"])
            {
                Check.That(Code.Name((int)(double)kv.Value) == kv.Key, "code " + kv.Key);
            }
        }

        /// <summary>Every vector, and the long answers, through the reader in pieces cut at every offset.</summary>
        [Test]
        static void ReaderJoinsLongAnswersWhateverTheCuts()
        {
            var frames = Frames();
            var stream = frames.SelectMany(FrameBytes).ToArray();
            List<Frame> whole = ReadAll(stream, stream.Length);
            int expected = frames.Count(v => (byte)(double)v["type"] != FrameType.More);
            Check.That(whole.Count == expected, "read " + whole.Count + " answers, want " + expected);
            string[] longAnswer = { "welcome of a resume, the first of three frames", "more of a welcome, another to come", "more of a welcome, the last" };
            byte[] three = longAnswer.SelectMany(n => FrameBytes(frames.Single(v => (string)v["name"] == n))).ToArray();
            List<Frame> one = ReadAll(three, three.Length);
            Check.That(one.Count == 1 && one[0].Type == FrameType.Welcome, "the three frames of a long WELCOME gave " + one.Count + " answers");
            int items = frames.Where(v => longAnswer.Contains((string)v["name"])).SelectMany(FieldsOf).Count(f => Tag.IsList(f.Tag));
            Check.That(one[0].List.Count(f => Tag.IsList(f.Tag)) == items, "the joined WELCOME lost list items");
            Check.That(one[0].Get(Tag.More) == null, "the joined WELCOME kept its more field");
            for (int cut = 1; cut <= 64; cut++)
            {
                List<Frame> again = ReadAll(stream, cut);
                Check.That(again.Count == whole.Count, "pieces of " + cut + ": " + again.Count + " answers");
            }
        }

        static Frame DecodeWhole(byte[] b)
        {
            int size;
            return Wire.Decode(b, 0, b.Length, out size);
        }

        static List<Frame> ReadAll(byte[] stream, int piece)
        {
            var reader = new FrameReader();
            var got = new List<Frame>();
            for (int at = 0; at < stream.Length; at += piece)
            {
                reader.Push(stream, at, Math.Min(piece, stream.Length - at));
                for (Frame f = reader.Next(); f != null; f = reader.Next()) got.Add(f);
            }
            return got;
        }

        [Test]
        static void MoreThatContinuesNothingIsAProtocolError()
        {
            byte[] more = FrameBytes(Frames().First(v => (byte)(double)v["type"] == FrameType.More));
            var reader = new FrameReader();
            reader.Push(more, 0, more.Length);
            Check.Throws<SessionProtocolException>(() => reader.Next(), "a lone MORE");
        }

        [Test]
        static void LengthsOutOfRangeAreProtocolErrors()
        {
            foreach (uint n in new uint[] { 0, 8, 65537, uint.MaxValue })
            {
                var b = new byte[13];
                Wire.PutU32(b, 0, n);
                int size;
                Check.Throws<SessionProtocolException>(() => Wire.Decode(b, 0, b.Length, out size), "length " + n);
            }
        }

        /// <summary>Mutated vectors and random bytes: the reader returns frames, waits for more, or throws SessionProtocolException; nothing else.</summary>
        [Test]
        static void BrokenBytesRaiseOnlyTheProtocolError()
        {
            var rng = new Random(20261202);
            List<byte[]> seeds = Frames().Select(FrameBytes).ToList();
            int protocolErrors = 0;
            for (int i = 0; i < 20000; i++)
            {
                byte[] b;
                if (i % 4 == 0)
                {
                    b = new byte[rng.Next(4, 200)];
                    rng.NextBytes(b);
                    if (rng.Next(2) == 0) Wire.PutU32(b, 0, (uint)rng.Next(9, b.Length + 9)); // plausible lengths reach the fields
                }
                else
                {
                    b = (byte[])seeds[rng.Next(seeds.Count)].Clone();
                    for (int m = rng.Next(1, 4); m > 0; m--) b[rng.Next(b.Length)] = (byte)rng.Next(256);
                    if (rng.Next(3) == 0) b = b.Take(rng.Next(1, b.Length)).ToArray();
                }
                var reader = new FrameReader();
                try
                {
                    reader.Push(b, 0, b.Length);
                    while (reader.Next() != null)
                    {
                    }
                }
                catch (SessionProtocolException)
                {
                    protocolErrors++;
                }
                catch (Exception e)
                {
                    throw new TestFailure("bytes " + Vectors.Hex(b) + ": " + e.GetType().Name + ": " + e.Message);
                }
            }
            Check.That(protocolErrors > 1000, "only " + protocolErrors + " of 20000 broken inputs were protocol errors");
        }

        [Test]
        static void GivenTwiceAndWrongSizesAreProtocolErrors()
        {
            var cases = new Dictionary<string, List<Field>>
            {
                { "a key given twice", new List<Field> { Field.Bytes(Tag.Key, new byte[] { 1 }), Field.Bytes(Tag.Key, new byte[] { 2 }) } },
                { "a token of 7 bytes", new List<Field> { Field.Bytes(Tag.Token, new byte[7]) } },
                { "a key of 128 bytes", new List<Field> { Field.Bytes(Tag.Key, new byte[128]) } },
                { "a held item cut short", new List<Field> { Field.Bytes(Tag.Held, new byte[] { 1, 0, 5, 1 }) } },
            };
            foreach (var c in cases)
            {
                byte[] b = Wire.Encode(FrameType.Granted, 1, c.Value);
                Check.Throws<SessionProtocolException>(() => DecodeWhole(b), c.Key);
            }
        }
    }
}
