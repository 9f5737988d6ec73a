using System;
using System.Collections.Generic;
using System.Runtime.CompilerServices;
using System.Text;

[assembly: InternalsVisibleTo("LockingCenter.Client.Tests")]

namespace LockingCenter
{
    // The session protocol's bytes (docs/protocol.md, "Mutex port, session
    // protocol (v2)"): a connection begins with the preface "LC/2", then
    // frames go both ways. A frame is [length u32][type u8][id u64][fields],
    // the length counting the bytes after itself (9 to 65,536); a field is
    // [tag u8][size u16][value]. Integers are big-endian and unsigned.

    /// <summary>Frame types.</summary>
    internal static class FrameType
    {
        public const byte Hello = 0x01, Resume = 0x02, Acquire = 0x03, Release = 0x04, Renew = 0x05, Cancel = 0x06,
            Describe = 0x07, Ping = 0x08, Close = 0x09, Watch = 0x0a,
            Welcome = 0x81, Granted = 0x82, Ok = 0x83, Refused = 0x84, Lost = 0x85, Info = 0x86, Goodbye = 0x87,
            Event = 0x88, More = 0x89;
    }

    /// <summary>Field tags.</summary>
    internal static class Tag
    {
        public const byte Key = 0x01, Name = 0x02, TtlMs = 0x03, Credential = 0x04, Session = 0x05, Secret = 0x06,
            Token = 0x07, WaitMs = 0x08, LeaseMs = 0x09, DelayMs = 0x0a, Target = 0x0b, Server = 0x0c, Code = 0x0d,
            Message = 0x0e, Queue = 0x0f, Applied = 0x10, LeftMs = 0x11, HeldMs = 0x12, KeepaliveMs = 0x13,
            Request = 0x14, Mode = 0x15, Limit = 0x16, Priority = 0x17, Reentrant = 0x18, Owner = 0x19, Count = 0x1a,
            Leader = 0x1b, Event = 0x1c, AtMs = 0x1d, More = 0x1e, Note = 0x1f, Held = 0x20, Parked = 0x21,
            Holder = 0x22, Lapse = 0x23;

        public static bool IsList(byte tag) => tag == Held || tag == Parked || tag == Holder;
    }

    /// <summary>The codes of REFUSED, LOST and GOODBYE, as docs/protocol.md numbers them.</summary>
    internal static class Code
    {
        public const byte Busy = 1, Timeout = 2, Cancelled = 3, Reset = 4, StaleToken = 5, Duplicate = 6,
            BadRequest = 7, Unsupported = 8, SessionEnded = 9, NotDurable = 10, LeaseExpired = 11,
            SessionExpired = 12, ProtocolError = 13, UnknownSession = 14, ShuttingDown = 15, Deadlock = 16,
            LimitMismatch = 17, Upgrade = 18, NotLeader = 19, SlowConsumer = 20, Unauthenticated = 21,
            Forbidden = 22, RateLimited = 23, OverLimit = 24;

        static readonly string[] Names =
        {
            null, "busy", "timeout", "cancelled", "reset", "stale_token", "duplicate", "bad_request", "unsupported",
            "session_ended", "not_durable", "lease_expired", "session_expired", "protocol_error", "unknown_session",
            "shutting_down", "deadlock", "limit_mismatch", "upgrade", "not_leader", "slow_consumer",
            "unauthenticated", "forbidden", "rate_limited", "over_limit",
        };

        /// <summary>A code's name as docs/protocol.md spells it, or "code N" for one it does not list.</summary>
        public static string Name(int code) =>
            code > 0 && code < Names.Length ? Names[code] : "code " + code;
    }

    /// <summary>One field: a tag and its value; a list item's fields are decoded into Items.</summary>
    internal struct Field
    {
        public readonly byte Tag;
        public readonly byte[] Value;
        public readonly Fields Items;

        public Field(byte tag, byte[] value, Fields items = null)
        {
            Tag = tag;
            Value = value;
            Items = items;
        }

        public static Field U8(byte tag, byte v) => new Field(tag, new[] { v });

        public static Field U32(byte tag, uint v) =>
            new Field(tag, new[] { (byte)(v >> 24), (byte)(v >> 16), (byte)(v >> 8), (byte)v });

        public static Field U64(byte tag, ulong v)
        {
            var b = new byte[8];
            Wire.PutU64(b, 0, v);
            return new Field(tag, b);
        }

        public static Field Bytes(byte tag, byte[] v) => new Field(tag, v);
    }

    /// <summary>The fields of a frame or of a list item, in order.</summary>
    internal class Fields
    {
        public readonly List<Field> List;

        public Fields(List<Field> list)
        {
            List = list;
        }

        /// <summary>The value of tag, or null.</summary>
        public byte[] Get(byte tag)
        {
            foreach (Field f in List)
            {
                if (f.Tag == tag) return f.Value;
            }
            return null;
        }

        /// <summary>A u8 or u32 field as a number, or null when absent.</summary>
        public uint? Num(byte tag)
        {
            byte[] v = Get(tag);
            if (v == null) return null;
            return v.Length == 1 ? v[0] : Wire.GetU32(v, 0);
        }

        /// <summary>A u64 field, or null when absent.</summary>
        public ulong? U64(byte tag)
        {
            byte[] v = Get(tag);
            return v == null ? (ulong?)null : Wire.GetU64(v, 0);
        }

        /// <summary>A byte string field as UTF-8 text (invalid bytes replaced), or null when absent.</summary>
        public string Text(byte tag)
        {
            byte[] v = Get(tag);
            return v == null ? null : Encoding.UTF8.GetString(v);
        }

        /// <summary>Every list item of tag, in order.</summary>
        public List<Fields> Items(byte tag)
        {
            var items = new List<Fields>();
            foreach (Field f in List)
            {
                if (f.Tag == tag) items.Add(f.Items);
            }
            return items;
        }
    }

    /// <summary>A decoded frame: its type, its request id and its fields.</summary>
    internal sealed class Frame : Fields
    {
        public readonly byte Type;
        public readonly ulong Id;

        public Frame(byte type, ulong id, List<Field> list) : base(list)
        {
            Type = type;
            Id = id;
        }
    }

    /// <summary>Encoding and decoding of frames and fields.</summary>
    internal static class Wire
    {
        public static readonly byte[] Preface = { 0x4c, 0x43, 0x2f, 0x32 };
        public const int MaxFrame = 65536;
        const int Head = 9;

        // What a field's value may be: a fixed size (the integers, the
        // secret), or a byte string of at most so many bytes.
        static readonly byte[] FixedSize = new byte[256];
        static readonly int[] MaxSize = new int[256];

        static Wire()
        {
            for (int i = 0; i < 256; i++) MaxSize[i] = 0xffff;
            byte[] fixed4 = { Tag.TtlMs, Tag.WaitMs, Tag.LeaseMs, Tag.DelayMs, Tag.Queue, Tag.LeftMs, Tag.HeldMs, Tag.KeepaliveMs, Tag.Limit, Tag.Priority, Tag.Count };
            byte[] fixed8 = { Tag.Session, Tag.Token, Tag.Target, Tag.Applied, Tag.Request, Tag.AtMs };
            byte[] fixed1 = { Tag.Code, Tag.Mode, Tag.Reentrant, Tag.Event, Tag.More, Tag.Lapse };
            foreach (byte t in fixed4) FixedSize[t] = 4;
            foreach (byte t in fixed8) FixedSize[t] = 8;
            foreach (byte t in fixed1) FixedSize[t] = 1;
            FixedSize[Tag.Secret] = 16;
            MaxSize[Tag.Key] = MaxSize[Tag.Name] = MaxSize[Tag.Owner] = 127;
            MaxSize[Tag.Credential] = MaxSize[Tag.Message] = MaxSize[Tag.Note] = 1024;
            MaxSize[Tag.Server] = MaxSize[Tag.Leader] = 255;
        }

        public static uint GetU32(byte[] b, int at) =>
            (uint)b[at] << 24 | (uint)b[at + 1] << 16 | (uint)b[at + 2] << 8 | b[at + 3];

        public static ulong GetU64(byte[] b, int at) => (ulong)GetU32(b, at) << 32 | GetU32(b, at + 4);

        public static void PutU32(byte[] b, int at, uint v)
        {
            b[at] = (byte)(v >> 24);
            b[at + 1] = (byte)(v >> 16);
            b[at + 2] = (byte)(v >> 8);
            b[at + 3] = (byte)v;
        }

        public static void PutU64(byte[] b, int at, ulong v)
        {
            PutU32(b, at, (uint)(v >> 32));
            PutU32(b, at + 4, (uint)v);
        }

        /// <summary>The bytes of a frame of type with request id and fields.</summary>
        public static byte[] Encode(byte type, ulong id, IList<Field> fields)
        {
            int n = 0;
            foreach (Field f in fields) n += 3 + f.Value.Length;
            var b = new byte[4 + Head + n];
            PutU32(b, 0, (uint)(Head + n));
            b[4] = type;
            PutU64(b, 5, id);
            int at = 4 + Head;
            foreach (Field f in fields)
            {
                b[at] = f.Tag;
                b[at + 1] = (byte)(f.Value.Length >> 8);
                b[at + 2] = (byte)f.Value.Length;
                Buffer.BlockCopy(f.Value, 0, b, at + 3, f.Value.Length);
                at += 3 + f.Value.Length;
            }
            return b;
        }

        /// <summary>
        /// Decodes a sequence of fields. Throws SessionProtocolException for a
        /// field that runs past the end, a fixed-size field of another size, a
        /// byte string over its limit, a tag given twice (list tags excepted),
        /// or a malformed list item.
        /// </summary>
        public static Fields DecodeFields(byte[] b, int at, int end)
        {
            var list = new List<Field>();
            ulong seenLow = 0, seenHigh = 0; // a bit per tag below 64, then below 128; higher tags are checked by search
            while (at < end)
            {
                if (end - at < 3) throw new SessionProtocolException("a field header cut short");
                byte tag = b[at];
                int size = b[at + 1] << 8 | b[at + 2];
                if (size > end - at - 3) throw new SessionProtocolException(string.Format("field 0x{0:x2} runs past its frame", tag));
                if (FixedSize[tag] != 0 && size != FixedSize[tag])
                {
                    throw new SessionProtocolException(string.Format("field 0x{0:x2} of {1} bytes, want {2}", tag, size, FixedSize[tag]));
                }
                if (size > MaxSize[tag])
                {
                    throw new SessionProtocolException(string.Format("field 0x{0:x2} of {1} bytes, over its limit of {2}", tag, size, MaxSize[tag]));
                }
                var value = new byte[size];
                Buffer.BlockCopy(b, at + 3, value, 0, size);
                if (Tag.IsList(tag))
                {
                    list.Add(new Field(tag, value, DecodeFields(value, 0, size)));
                }
                else
                {
                    bool twice;
                    if (tag < 64)
                    {
                        twice = (seenLow & 1UL << tag) != 0;
                        seenLow |= 1UL << tag;
                    }
                    else if (tag < 128)
                    {
                        twice = (seenHigh & 1UL << (tag - 64)) != 0;
                        seenHigh |= 1UL << (tag - 64);
                    }
                    else
                    {
                        twice = list.Exists(x => x.Tag == tag);
                    }
                    if (twice) throw new SessionProtocolException(string.Format("field 0x{0:x2} given twice", tag));
                    list.Add(new Field(tag, value));
                }
                at += 3 + size;
            }
            return new Fields(list);
        }

        /// <summary>
        /// Decodes the frame at b[at..end). Returns null when the bytes hold
        /// only part of a frame, else the frame and, in size, the bytes it
        /// took. Throws SessionProtocolException for a length outside 9 to
        /// 65,536 (known from the first four bytes) or malformed fields.
        /// </summary>
        public static Frame Decode(byte[] b, int at, int end, out int size)
        {
            size = 0;
            if (end - at < 4) return null;
            uint n = GetU32(b, at);
            if (n < Head || n > MaxFrame) throw new SessionProtocolException("frame length " + n + ", want 9 to " + MaxFrame);
            if (end - at < 4 + n) return null;
            size = 4 + (int)n;
            Fields fields = DecodeFields(b, at + 4 + Head, at + size);
            return new Frame(b[at + 4], GetU64(b, at + 5), fields.List);
        }
    }

    /// <summary>
    /// Reads the frames of a connection from the bytes pushed into it, and
    /// joins a long answer (docs/protocol.md, Long answers) into one frame: a
    /// WELCOME or INFO with `more` comes out once its last MORE frame has
    /// come, with every item in order and without the field `more`. A GOODBYE
    /// inside such an answer comes out in its place (the answer never came).
    /// </summary>
    internal sealed class FrameReader
    {
        byte[] buf = new byte[4096];
        int start, end;
        Frame pending;

        /// <summary>Bytes not yet taken by a frame.</summary>
        public int Buffered => end - start;

        /// <summary>The first unread byte; Buffered must be above 0.</summary>
        public byte FirstUnread => buf[start];

        public void Push(byte[] chunk, int offset, int count)
        {
            if (end + count > buf.Length)
            {
                int have = end - start;
                byte[] into = have + count > buf.Length ? new byte[Math.Max(2 * buf.Length, have + count)] : buf;
                Buffer.BlockCopy(buf, start, into, 0, have);
                buf = into;
                start = 0;
                end = have;
            }
            Buffer.BlockCopy(chunk, offset, buf, end, count);
            end += count;
        }

        /// <summary>The next whole answer, or null until more bytes come. Throws SessionProtocolException.</summary>
        public Frame Next()
        {
            for (;;)
            {
                int size;
                Frame f = Wire.Decode(buf, start, end, out size);
                if (f == null) return null;
                start += size;
                if (start == end) start = end = 0;
                uint? moreField = f.Num(Tag.More);
                bool more = moreField.HasValue && moreField.Value > 0;
                if (pending == null)
                {
                    if (f.Type == FrameType.More)
                    {
                        throw new SessionProtocolException("a MORE frame (id " + f.Id + ") that continues no answer");
                    }
                    if (!more) return f;
                    pending = new Frame(f.Type, f.Id, f.List.FindAll(x => x.Tag != Tag.More));
                    continue;
                }
                if (f.Type == FrameType.Goodbye)
                {
                    pending = null;
                    return f;
                }
                if (f.Type != FrameType.More || f.Id != pending.Id)
                {
                    throw new SessionProtocolException(string.Format("frame 0x{0:x2} (id {1}) inside the answer to {2}", f.Type, f.Id, pending.Id));
                }
                pending.List.AddRange(f.List.FindAll(x => x.Tag != Tag.More));
                if (!more)
                {
                    Frame whole = pending;
                    pending = null;
                    return whole;
                }
            }
        }
    }
}
