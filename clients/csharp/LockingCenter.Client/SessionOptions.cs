using System;
using System.Collections;
using System.IO;
using System.Net.Security;
using System.Reflection;
using System.Security.Cryptography.X509Certificates;

namespace LockingCenter
{
    /// <summary>How <see cref="Session.ConnectAsync(string, SessionOptions, System.Threading.CancellationToken)"/> opens a session.</summary>
    public sealed class SessionOptions
    {
        /// <summary>The session's source, matched by reset by source (at most 127 bytes of UTF-8); null or empty lets the server use the client's IP address.</summary>
        public string Name { get; set; }

        /// <summary>The TTL to ask for; the server clamps it to its range. Null: the server's default (10 s unless configured).</summary>
        public TimeSpan? Ttl { get; set; }

        /// <summary>The token sent as the session's credential, when the server has authentication on (at most 1,024 bytes).</summary>
        public string Token { get; set; }

        /// <summary>TLS for every connection of the session; null: plain TCP.</summary>
        public SessionTls Tls { get; set; }

        /// <summary>Bounds each TCP connect and TLS handshake. Default 5 s.</summary>
        public TimeSpan ConnectTimeout { get; set; } = TimeSpan.FromSeconds(5);

        /// <summary>
        /// Bounds every call that does not wait for a key (release, renew,
        /// describe, close, a try, and the answer of a connect) and, added to
        /// its wait bound, an acquire that has one. Default 10 s; zero: none.
        /// </summary>
        public TimeSpan RequestTimeout { get; set; } = TimeSpan.FromSeconds(10);

        /// <summary>
        /// Options from the environment, as lc-cli reads them: LC_TOKEN (the
        /// token), LC_CA_FILE (PEM CA certificates the server must chain to),
        /// LC_CERT_FILE (a client certificate with its key, as a PKCS#12 file;
        /// see <see cref="SessionTls.ClientCertificate"/>), LC_TLS ("1" or
        /// "true": TLS with the system's roots) and LC_SOURCE (the name). A CA
        /// or a certificate turns TLS on. Files are read here, so a missing one
        /// throws at once.
        /// </summary>
        /// <exception cref="NotSupportedException">LC_KEY_FILE is set: a PEM
        /// key cannot be joined to a certificate with the class library of
        /// netstandard2.0 or Mono; give the certificate and its key as one
        /// PKCS#12 file in LC_CERT_FILE.</exception>
        public static SessionOptions FromEnvironment() => FromEnvironment(Environment.GetEnvironmentVariables());

        /// <summary>As <see cref="FromEnvironment()"/>, from the variables given.</summary>
        public static SessionOptions FromEnvironment(IDictionary env)
        {
            Func<string, string> get = name => env.Contains(name) ? env[name] as string : null;
            var o = new SessionOptions();
            if (!string.IsNullOrEmpty(get("LC_SOURCE"))) o.Name = get("LC_SOURCE");
            if (!string.IsNullOrEmpty(get("LC_TOKEN"))) o.Token = get("LC_TOKEN");
            if (!string.IsNullOrEmpty(get("LC_KEY_FILE")))
            {
                throw new NotSupportedException("LC_KEY_FILE: a PEM private key cannot be joined to a certificate here; " +
                                                "give the certificate and its key as one PKCS#12 file in LC_CERT_FILE");
            }
            SessionTls tls = null;
            if (!string.IsNullOrEmpty(get("LC_CA_FILE"))) (tls = tls ?? new SessionTls()).CaFile = get("LC_CA_FILE");
            if (!string.IsNullOrEmpty(get("LC_CERT_FILE")))
            {
                (tls = tls ?? new SessionTls()).ClientCertificate = new X509Certificate2(File.ReadAllBytes(get("LC_CERT_FILE")));
            }
            string flag = (get("LC_TLS") ?? "").Trim().ToLowerInvariant();
            if (tls == null && (flag == "1" || flag == "true" || flag == "yes")) tls = new SessionTls();
            tls?.Load();
            o.Tls = tls;
            return o;
        }
    }

    /// <summary>TLS settings of a session.</summary>
    public sealed class SessionTls
    {
        X509Certificate2Collection authorities;

        /// <summary>A PEM file of the CA certificates the server's certificate must chain to; null: the system's roots.</summary>
        public string CaFile { get; set; }

        /// <summary>The name the server's certificate must carry; null: the host of the address.</summary>
        public string ServerName { get; set; }

        /// <summary>A client certificate with its private key (for example <c>new X509Certificate2("client.p12", password)</c>); null: none.</summary>
        public X509Certificate2 ClientCertificate { get; set; }

        /// <summary>Reads <see cref="CaFile"/> once.</summary>
        internal void Load()
        {
            if (authorities != null || CaFile == null) return;
            var found = new X509Certificate2Collection();
            string text = File.ReadAllText(CaFile);
            const string begin = "-----BEGIN CERTIFICATE-----", end = "-----END CERTIFICATE-----";
            for (int at = text.IndexOf(begin, StringComparison.Ordinal); at >= 0; at = text.IndexOf(begin, at, StringComparison.Ordinal))
            {
                int stop = text.IndexOf(end, at, StringComparison.Ordinal);
                if (stop < 0) break;
                string b64 = text.Substring(at + begin.Length, stop - at - begin.Length);
                found.Add(new X509Certificate2(Convert.FromBase64String(b64)));
                at = stop + end.Length;
            }
            if (found.Count == 0) throw new ArgumentException(CaFile + ": no PEM certificate in the file");
            authorities = found;
        }

        /// <summary>
        /// Whether the server's certificate is good: valid for the name (the
        /// platform checks it) and chaining to one of the CA file's
        /// certificates, or to the system's roots without a CA file.
        /// </summary>
        internal bool Validate(string host, X509Certificate certificate, X509Chain presented, SslPolicyErrors errors)
        {
            if ((errors & ~SslPolicyErrors.RemoteCertificateChainErrors) != 0) return false;
            if (authorities == null) return errors == SslPolicyErrors.None;
            return IsMono ? MonoChainsToAuthority(host, certificate, presented) : ChainsToAuthority(certificate);
        }

        static readonly bool IsMono = Type.GetType("Mono.Runtime") != null;

        bool ChainsToAuthority(X509Certificate certificate)
        {
            using (var chain = new X509Chain())
            {
                chain.ChainPolicy.RevocationMode = X509RevocationMode.NoCheck;
                chain.ChainPolicy.VerificationFlags = X509VerificationFlags.AllowUnknownCertificateAuthority;
                chain.ChainPolicy.ExtraStore.AddRange(authorities);
                if (!chain.Build(new X509Certificate2(certificate))) return false;
                X509Certificate2 root = chain.ChainElements[chain.ChainElements.Count - 1].Certificate;
                foreach (X509Certificate2 ca in authorities)
                {
                    if (ca.Thumbprint == root.Thumbprint) return true;
                }
                return false;
            }
        }

        /// <summary>
        /// Mono's X509Chain reads no ECDSA key (lcd's certificates are ECDSA),
        /// so on Mono the chain goes to the validator of Mono's own TLS stack
        /// (Mono.Security, part of every Mono install), with the CA file's
        /// certificates as its only trust anchors.
        /// </summary>
        bool MonoChainsToAuthority(string host, X509Certificate certificate, X509Chain presented)
        {
            Assembly mono = Assembly.Load("Mono.Security, Version=4.0.0.0, Culture=neutral, PublicKeyToken=0738eb9f132ed756");
            Type settingsType = mono.GetType("Mono.Security.Interface.MonoTlsSettings", true);
            object settings = Activator.CreateInstance(settingsType);
            settingsType.GetProperty("TrustAnchors").SetValue(settings, new X509CertificateCollection(authorities));
            object validator = mono.GetType("Mono.Security.Interface.CertificateValidationHelper", true)
                .GetMethod("GetValidator").Invoke(null, new[] { settings });
            var certificates = new X509CertificateCollection { certificate };
            if (presented != null)
            {
                for (int i = 1; i < presented.ChainElements.Count; i++) certificates.Add(presented.ChainElements[i].Certificate);
            }
            object result = mono.GetType("Mono.Security.Interface.ICertificateValidator", true)
                .GetMethod("ValidateCertificate").Invoke(validator, new object[] { host, false, certificates });
            return (bool)result.GetType().GetProperty("Trusted").GetValue(result);
        }
    }

    /// <summary>How <see cref="Session.AcquireAsync(string, TimeSpan?, System.Threading.CancellationToken, AcquireOptions)"/> asks for a key.</summary>
    public sealed class AcquireOptions
    {
        /// <summary>The lock's own lease: it ends at the latest this long after its grant (or its last renew), lost with <see cref="LostReason.LeaseExpired"/>. Null or zero: none, the lock lives as long as its session.</summary>
        public TimeSpan? Lease { get; set; }

        /// <summary>Lock-delay: when the lock is lost (not released), nobody gets the key for this long. At most 60 s. Null: the server's default.</summary>
        public TimeSpan? LockDelay { get; set; }

        /// <summary>Shared (readers): any number of shared holders at once, no exclusive one beside them.</summary>
        public bool Shared { get; set; }

        /// <summary>A semaphore of this many holders (above 1; exclusive only). 0 or 1: one holder.</summary>
        public uint Limit { get; set; }

        /// <summary>Higher is served first (equal in arrival order); a waiting request ages one a second.</summary>
        public int Priority { get; set; }

        /// <summary>Lets a holder of the key with the same <see cref="Owner"/> count up on its lock, same token.</summary>
        public bool Reentrant { get; set; }

        /// <summary>
        /// Who within the session (at most 127 bytes): for reentrancy and
        /// deadlock detection. Null: each acquire is its own owner, as if from a
        /// client of its own, so that concurrent acquires of one key on one
        /// session queue; a reentrant acquire without one uses the session's.
        /// </summary>
        public string Owner { get; set; }

        /// <summary>The holder's note: free text shown wherever the lock is listed (at most 1,024 bytes of UTF-8). Not a place for secrets.</summary>
        public string Note { get; set; }
    }
}
