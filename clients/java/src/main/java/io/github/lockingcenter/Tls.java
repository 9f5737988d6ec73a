package io.github.lockingcenter;

import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.KeyFactory;
import java.security.KeyStore;
import java.security.PrivateKey;
import java.security.cert.Certificate;
import java.security.cert.CertificateFactory;
import java.security.spec.PKCS8EncodedKeySpec;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import javax.net.ssl.KeyManagerFactory;
import javax.net.ssl.SSLContext;
import javax.net.ssl.TrustManagerFactory;

/**
 * SSLContexts from PEM files, with the JDK only. Certificates: PEM
 * ("BEGIN CERTIFICATE", one or more). Keys: PKCS#8 ("BEGIN PRIVATE KEY"),
 * RSA, EC or Ed25519; PKCS#1 ("BEGIN RSA PRIVATE KEY"), SEC 1 ("BEGIN EC
 * PRIVATE KEY") and encrypted keys are not read (convert them with
 * {@code openssl pkcs8 -topk8 -nocrypt}).
 */
public final class Tls {
    private Tls() {}

    /**
     * An SSLContext that trusts the CAs of caFile (null: the JDK's own)
     * and, when certFile and keyFile are given, presents that client
     * certificate.
     */
    public static SSLContext context(Path caFile, Path certFile, Path keyFile) throws IOException {
        try {
            TrustManagerFactory tmf = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
            if (caFile == null) {
                tmf.init((KeyStore) null);
            } else {
                KeyStore trust = KeyStore.getInstance("PKCS12");
                trust.load(null, null);
                int i = 0;
                for (Certificate c : certificates(caFile)) {
                    trust.setCertificateEntry("ca-" + i++, c);
                }
                if (i == 0) {
                    throw new IOException(caFile + " holds no certificate");
                }
                tmf.init(trust);
            }
            KeyManagerFactory kmf = null;
            if (certFile != null || keyFile != null) {
                if (certFile == null || keyFile == null) {
                    throw new IOException("a client certificate needs both its certificate and its key file");
                }
                KeyStore ks = KeyStore.getInstance("PKCS12");
                ks.load(null, null);
                char[] pw = new char[0];
                ks.setKeyEntry("client", privateKey(keyFile), pw, certificates(certFile).toArray(new Certificate[0]));
                kmf = KeyManagerFactory.getInstance(KeyManagerFactory.getDefaultAlgorithm());
                kmf.init(ks, pw);
            }
            SSLContext ctx = SSLContext.getInstance("TLS");
            ctx.init(kmf == null ? null : kmf.getKeyManagers(), tmf.getTrustManagers(), null);
            return ctx;
        } catch (GeneralSecurityException e) {
            throw new IOException("TLS files: " + e.getMessage(), e);
        }
    }

    static List<Certificate> certificates(Path file) throws IOException, GeneralSecurityException {
        CertificateFactory cf = CertificateFactory.getInstance("X.509");
        return new ArrayList<>(cf.generateCertificates(new ByteArrayInputStream(Files.readAllBytes(file))));
    }

    static PrivateKey privateKey(Path file) throws IOException, GeneralSecurityException {
        String pem = Files.readString(file, StandardCharsets.US_ASCII);
        String begin = "-----BEGIN PRIVATE KEY-----", end = "-----END PRIVATE KEY-----";
        int b = pem.indexOf(begin), e = pem.indexOf(end);
        if (b < 0 || e < b) {
            throw new IOException(file + ": no PKCS#8 key (BEGIN PRIVATE KEY); convert it with openssl pkcs8 -topk8 -nocrypt");
        }
        byte[] der = Base64.getMimeDecoder().decode(pem.substring(b + begin.length(), e));
        PKCS8EncodedKeySpec spec = new PKCS8EncodedKeySpec(der);
        for (String alg : new String[] {"RSA", "EC", "Ed25519"}) {
            try {
                return KeyFactory.getInstance(alg).generatePrivate(spec);
            } catch (GeneralSecurityException ignored) {
                // the next algorithm
            }
        }
        throw new IOException(file + ": a PKCS#8 key of an algorithm other than RSA, EC or Ed25519");
    }
}
