using System;
using System.Text.RegularExpressions;

namespace LockingCenter
{
    /// <summary>
    /// The base of the session API's failures. <see cref="ServerCode"/> is
    /// the code the server answered with, as docs/protocol.md names it
    /// ("timeout", "forbidden", ...), and <see cref="ServerMessage"/> its
    /// words; both are null when the failure is the client's own (a bound
    /// that ran out, a dropped connection). A busy try is no failure: it
    /// returns null. Cancelling a call's CancellationToken throws
    /// <see cref="OperationCanceledException"/>, as .NET does.
    /// </summary>
    public partial class SessionException : LockingCenterException
    {
        /// <summary>Creates the exception.</summary>
        public SessionException(string message, string serverCode = null, string serverMessage = null, Exception inner = null)
            : base(message, inner)
        {
            ServerCode = serverCode;
            ServerMessage = serverMessage;
        }

        /// <summary>The server's code, or null.</summary>
        public string ServerCode { get; }

        /// <summary>The server's words, or null.</summary>
        public string ServerMessage { get; }
    }

    /// <summary>A wait bound ran out on the server ("timeout"), or a call that waits for no key had no answer within its bound.</summary>
    public class SessionTimeoutException : SessionException
    {
        /// <summary>Creates the exception.</summary>
        public SessionTimeoutException(string message, string serverCode = null, string serverMessage = null, Exception inner = null)
            : base(message, serverCode, serverMessage, inner) { }
    }

    /// <summary>The server took the request out of its queue ("cancelled") for a CANCEL this caller did not make.</summary>
    public class SessionCancelledException : SessionException
    {
        /// <summary>Creates the exception.</summary>
        public SessionCancelledException(string message, string serverCode = null, string serverMessage = null)
            : base(message, serverCode, serverMessage) { }
    }

    /// <summary>Why a lock ended without a release.</summary>
    public enum LostReason
    {
        /// <summary>Its lease ran out, by the server's count or by the client's own, which ends first.</summary>
        LeaseExpired,
        /// <summary>The session's TTL passed without the server hearing from it.</summary>
        SessionExpired,
        /// <summary>A reset (by key or by source, on either port) took it.</summary>
        Reset,
        /// <summary>The session ended (closed) before the lock was released.</summary>
        SessionClosed,
        /// <summary>The server no longer holds it, for a reason it did not send (lost while the connection was down, or a stale token).</summary>
        NotHeld,
    }

    /// <summary>A lock ended without a release; <see cref="Reason"/> says why.</summary>
    public class LockLostException : SessionException
    {
        /// <summary>Creates the exception.</summary>
        public LockLostException(string message, LostReason reason, string key, ulong token, string serverCode = null)
            : base(message, serverCode)
        {
            Reason = reason;
            Key = key;
            Token = token;
        }

        /// <summary>Why the lock was lost.</summary>
        public LostReason Reason { get; }

        /// <summary>The key of the lock, as text.</summary>
        public string Key { get; }

        /// <summary>The fencing token of the lock.</summary>
        public ulong Token { get; }
    }

    /// <summary>The session expired (its TTL passed), or the server no longer knows it ("unknown_session").</summary>
    public class SessionExpiredException : SessionException
    {
        /// <summary>Creates the exception.</summary>
        public SessionExpiredException(string message, string serverCode = null, string serverMessage = null)
            : base(message, serverCode, serverMessage) { }
    }

    /// <summary>The session was closed: by <see cref="Session.CloseAsync"/>, or by the server ("session_ended").</summary>
    public class SessionClosedException : SessionException
    {
        /// <summary>Creates the exception.</summary>
        public SessionClosedException(string message, string serverCode = null, string serverMessage = null)
            : base(message, serverCode, serverMessage) { }
    }

    /// <summary>Every address failed and the last said it does not lead the cluster; <see cref="Leader"/> is the leader it named, if any.</summary>
    public class NotLeaderException : SessionException
    {
        /// <summary>Creates the exception.</summary>
        public NotLeaderException(string message, string serverMessage, string leader)
            : base(message, "not_leader", serverMessage)
        {
            Leader = leader;
        }

        /// <summary>The leader the last node named, or empty.</summary>
        public string Leader { get; }
    }

    /// <summary>The server refused the session's token ("unauthenticated").</summary>
    public class UnauthenticatedException : SessionException
    {
        /// <summary>Creates the exception.</summary>
        public UnauthenticatedException(string message, string serverCode = null, string serverMessage = null)
            : base(message, serverCode, serverMessage) { }
    }

    /// <summary>The session's principal may not use that key ("forbidden").</summary>
    public class ForbiddenException : SessionException
    {
        /// <summary>Creates the exception.</summary>
        public ForbiddenException(string message, string serverCode = null, string serverMessage = null)
            : base(message, serverCode, serverMessage) { }
    }

    /// <summary>The source sent more requests than the server allows ("rate_limited"); nothing changed.</summary>
    public class RateLimitedException : SessionException
    {
        /// <summary>Creates the exception.</summary>
        public RateLimitedException(string message, string serverCode = null, string serverMessage = null)
            : base(message, serverCode, serverMessage) { }
    }

    /// <summary>The source holds or waits for as many keys as the server allows, or the server has as many connections ("over_limit").</summary>
    public class OverLimitException : SessionException
    {
        /// <summary>Creates the exception.</summary>
        public OverLimitException(string message, string serverCode = null, string serverMessage = null)
            : base(message, serverCode, serverMessage) { }
    }

    /// <summary>The acquire would close a cycle of waits ("deadlock"); it did not wait.</summary>
    public class DeadlockException : SessionException
    {
        /// <summary>Creates the exception.</summary>
        public DeadlockException(string message, string serverCode = null, string serverMessage = null)
            : base(message, serverCode, serverMessage) { }
    }

    /// <summary>The acquire's limit is not the key's ("limit_mismatch"); <see cref="Limit"/> is the key's, as the server's words name it (0 when they name none).</summary>
    public class LimitMismatchException : SessionException
    {
        static readonly Regex LastNumber = new Regex(@"(\d+)\D*$");

        /// <summary>Creates the exception.</summary>
        public LimitMismatchException(string message, string serverCode = null, string serverMessage = null)
            : base(message, serverCode, serverMessage)
        {
            Match m = LastNumber.Match(serverMessage ?? "");
            uint limit;
            if (m.Success && uint.TryParse(m.Groups[1].Value, out limit)) Limit = limit;
        }

        /// <summary>The key's limit.</summary>
        public uint Limit { get; }
    }

    /// <summary>A shared holder asked for the key exclusively ("upgrade").</summary>
    public class UpgradeRefusedException : SessionException
    {
        /// <summary>Creates the exception.</summary>
        public UpgradeRefusedException(string message, string serverCode = null, string serverMessage = null)
            : base(message, serverCode, serverMessage) { }
    }

    /// <summary>A release or renew named a token that is not a holder of the key now ("stale_token"): nothing changed.</summary>
    public class StaleTokenException : SessionException
    {
        /// <summary>Creates the exception.</summary>
        public StaleTokenException(string message, string serverCode = null, string serverMessage = null)
            : base(message, serverCode, serverMessage) { }
    }

    /// <summary>A reset withdrew the waiting acquire ("reset").</summary>
    public class LockResetException : SessionException
    {
        /// <summary>Creates the exception.</summary>
        public LockResetException(string message, string serverCode = null, string serverMessage = null)
            : base(message, serverCode, serverMessage) { }
    }

    /// <summary>Bytes that break the session protocol, from the server (or, in GOODBYE "protocol_error", from this client as the server read them).</summary>
    public class SessionProtocolException : SessionException
    {
        /// <summary>Creates the exception.</summary>
        public SessionProtocolException(string message, string serverCode = null, string serverMessage = null)
            : base(message, serverCode, serverMessage) { }
    }

    /// <summary>The network failed: a connect refused, a connection closed before its answer, a TLS handshake that failed.</summary>
    public class SessionConnectionException : SessionException
    {
        /// <summary>Creates the exception.</summary>
        public SessionConnectionException(string message, Exception inner = null) : base(message, null, null, inner) { }
    }

    /// <summary>A refusal of another code ("bad_request", "not_durable", "unsupported", ...): the request did nothing.</summary>
    public class RequestRefusedException : SessionException
    {
        /// <summary>Creates the exception.</summary>
        public RequestRefusedException(string message, string serverCode = null, string serverMessage = null)
            : base(message, serverCode, serverMessage) { }
    }

    static class Refusal
    {
        /// <summary>The exception of a REFUSED or GOODBYE with code and message, for what (e.g. "acquire \"k\"").</summary>
        public static SessionException Of(string what, int code, string message, string leader = null)
        {
            string name = Code.Name(code);
            string text = what + ": " + name + (string.IsNullOrEmpty(message) ? "" : ": " + message);
            switch (code)
            {
                case Code.Timeout: return new SessionTimeoutException(what + ": the wait ran out on the server (timeout)", name, message);
                case Code.Cancelled: return new SessionCancelledException(text, name, message);
                case Code.Reset: return new LockResetException(what + ": a reset withdrew the request (reset)", name, message);
                case Code.StaleToken: return new StaleTokenException(what + ": the token is not a holder of the key (stale_token)", name, message);
                case Code.SessionExpired:
                case Code.UnknownSession: return new SessionExpiredException(text, name, message);
                case Code.SessionEnded: return new SessionClosedException(text, name, message);
                case Code.Unauthenticated: return new UnauthenticatedException(text, name, message);
                case Code.Forbidden: return new ForbiddenException(text, name, message);
                case Code.RateLimited: return new RateLimitedException(text, name, message);
                case Code.OverLimit: return new OverLimitException(text, name, message);
                case Code.Deadlock: return new DeadlockException(text, name, message);
                case Code.LimitMismatch: return new LimitMismatchException(text, name, message);
                case Code.Upgrade: return new UpgradeRefusedException(text, name, message);
                case Code.ProtocolError: return new SessionProtocolException(text, name, message);
                case Code.NotLeader: return new NotLeaderException(text, message, leader ?? "");
                default: return new RequestRefusedException(text, name, message);
            }
        }
    }
}
