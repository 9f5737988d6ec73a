using System;
using System.Text;

namespace LockingCenter
{
    /// <summary>Action bytes of the mutex port.</summary>
    public enum RequestAction : byte
    {
        /// <summary>Take the key, queueing behind its holder.</summary>
        Lock = 1,
        /// <summary>Release the key, whoever holds it.</summary>
        Unlock = 2,
        /// <summary>Take the key from its holder; the first waiter gets it.</summary>
        ResetKey = 3,
        /// <summary>Release every key of a source and withdraw its waiters.</summary>
        ResetSource = 4,
        /// <summary>Take the key only if it is free now.</summary>
        TryLock = 5,
    }

    /// <summary>What an answer means when it is not a failure.</summary>
    public enum Outcome
    {
        /// <summary>The request succeeded ('+').</summary>
        Ok,
        /// <summary>A try-lock found the key held by another ('#').</summary>
        Busy,
    }

    /// <summary>
    /// The bytes of the mutex port. A request is one action byte, then the
    /// key and the source each as one length byte and that many bytes; unlock
    /// and reset-key carry no source, reset-source no key. The answer is one
    /// byte: '+', '-' or, to a try-lock, '#'.
    /// </summary>
    public static class Protocol
    {
        /// <summary>Longest key, in bytes.</summary>
        public const int MaxKeyLength = 127;

        /// <summary>Longest source, in bytes.</summary>
        public const int MaxSourceLength = 127;

        /// <summary>Answer: the request succeeded.</summary>
        public const byte AnswerOk = (byte)'+';

        /// <summary>Answer: refused, not stored, or withdrawn.</summary>
        public const byte AnswerFailed = (byte)'-';

        /// <summary>Answer to a try-lock: held by another.</summary>
        public const byte AnswerBusy = (byte)'#';

        static readonly UTF8Encoding Utf8 = new UTF8Encoding(false, true);

        /// <summary>
        /// Encodes one request. <paramref name="key"/> is ignored for
        /// <see cref="RequestAction.ResetSource"/> and <paramref name="source"/>
        /// for <see cref="RequestAction.Unlock"/> and
        /// <see cref="RequestAction.ResetKey"/>; null means empty.
        /// </summary>
        /// <exception cref="ArgumentException">The key is empty or over 127
        /// bytes, the source is over 127 bytes, or the action is unknown.</exception>
        public static byte[] EncodeRequest(RequestAction action, byte[] key, byte[] source)
        {
            bool withKey, withSource;
            switch (action)
            {
                case RequestAction.Lock:
                case RequestAction.TryLock:
                    withKey = withSource = true;
                    break;
                case RequestAction.Unlock:
                case RequestAction.ResetKey:
                    withKey = true;
                    withSource = false;
                    break;
                case RequestAction.ResetSource:
                    withKey = false;
                    withSource = true;
                    break;
                default:
                    throw new ArgumentException("unknown action " + (byte)action, nameof(action));
            }
            key = key ?? new byte[0];
            source = source ?? new byte[0];
            if (withKey) CheckKey(key);
            if (withSource) CheckSource(source);
            var request = new byte[1 + (withKey ? 1 + key.Length : 0) + (withSource ? 1 + source.Length : 0)];
            int at = 0;
            request[at++] = (byte)action;
            if (withKey) at = Put(request, at, key);
            if (withSource) Put(request, at, source);
            return request;
        }

        /// <summary>
        /// Interprets the answer byte to a request of <paramref name="action"/>.
        /// </summary>
        /// <returns><see cref="Outcome.Ok"/> for '+', <see cref="Outcome.Busy"/>
        /// for '#' to a try-lock.</returns>
        /// <exception cref="RequestFailedException">The answer is '-'.</exception>
        /// <exception cref="UnexpectedAnswerException">Any other byte.</exception>
        public static Outcome DecodeAnswer(RequestAction action, byte answer)
        {
            if (answer == AnswerOk) return Outcome.Ok;
            if (answer == AnswerBusy && action == RequestAction.TryLock) return Outcome.Busy;
            if (answer == AnswerFailed) throw new RequestFailedException(Name(action) + ": the server refused the request");
            throw new UnexpectedAnswerException(string.Format("{0}: unexpected answer 0x{1:x2}", Name(action), answer));
        }

        /// <summary>The UTF-8 bytes of <paramref name="text"/>.</summary>
        /// <exception cref="ArgumentException">The text is not valid UTF-16
        /// (a lone surrogate).</exception>
        public static byte[] ToBytes(string text, string paramName)
        {
            if (text == null) throw new ArgumentNullException(paramName);
            try
            {
                return Utf8.GetBytes(text);
            }
            catch (EncoderFallbackException e)
            {
                throw new ArgumentException("not encodable as UTF-8: " + e.Message, paramName, e);
            }
        }

        internal static void CheckKey(byte[] key)
        {
            if (key == null) throw new ArgumentNullException(nameof(key));
            if (key.Length == 0 || key.Length > MaxKeyLength)
            {
                throw new ArgumentException("key must be 1 to 127 bytes, got " + key.Length, nameof(key));
            }
        }

        internal static void CheckSource(byte[] source)
        {
            if (source == null) throw new ArgumentNullException(nameof(source));
            if (source.Length > MaxSourceLength)
            {
                throw new ArgumentException("source must be at most 127 bytes, got " + source.Length, nameof(source));
            }
        }

        internal static string Name(RequestAction action)
        {
            switch (action)
            {
                case RequestAction.Lock: return "lock";
                case RequestAction.Unlock: return "unlock";
                case RequestAction.ResetKey: return "reset";
                case RequestAction.ResetSource: return "reset source";
                case RequestAction.TryLock: return "trylock";
                default: return "action " + (byte)action;
            }
        }

        /// <summary>A quoted, printable form of bytes for messages.</summary>
        internal static string Printable(byte[] bytes)
        {
            var b = new StringBuilder("\"");
            foreach (byte c in bytes)
            {
                if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') b.Append((char)c);
                else b.AppendFormat("\\x{0:x2}", c);
            }
            return b.Append('"').ToString();
        }

        static int Put(byte[] request, int at, byte[] value)
        {
            request[at++] = (byte)value.Length;
            Buffer.BlockCopy(value, 0, request, at, value.Length);
            return at + value.Length;
        }
    }
}
