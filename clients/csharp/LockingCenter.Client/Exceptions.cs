using System;

namespace LockingCenter
{
    /// <summary>
    /// A request failed: the server refused it, or the network did
    /// (<see cref="Exception.InnerException"/> then holds the
    /// <see cref="System.Net.Sockets.SocketException"/> or
    /// <see cref="System.IO.IOException"/>). A busy try-lock is not a
    /// failure; it returns false.
    /// </summary>
    public class LockingCenterException : Exception
    {
        /// <summary>Creates the exception with a message.</summary>
        public LockingCenterException(string message) : base(message) { }

        /// <summary>Creates the exception with a message and its cause.</summary>
        public LockingCenterException(string message, Exception inner) : base(message, inner) { }
    }

    /// <summary>
    /// The server answered '-': it refused the request, could not store it,
    /// or a reset of the request's source withdrew it while it waited.
    /// </summary>
    public class RequestFailedException : LockingCenterException
    {
        /// <summary>Creates the exception with a message.</summary>
        public RequestFailedException(string message) : base(message) { }
    }

    /// <summary>The server answered a byte the protocol does not define for the request.</summary>
    public class UnexpectedAnswerException : LockingCenterException
    {
        /// <summary>Creates the exception with a message.</summary>
        public UnexpectedAnswerException(string message) : base(message) { }
    }
}
