import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { join } from 'node:path';
import { freePort } from '../../sim/ports';

/**
 * A Temporal frontend behind TLS, as a self-hosted cluster puts it: Debian's nginx terminating TLS (and,
 * for mTLS, verifying client certificates) and proxying gRPC to a plain dev server on loopback. The
 * certificates are a throwaway test PKI made with the real `openssl`; nginx runs with its own prefix,
 * config, pid and temp dirs under the test's directory, so no system nginx config is read or touched.
 */
export interface TestPki {
  /** The CA that signed the server and client certificates. */
  caCert: string;
  /** A second CA that signed nothing here: trusting it must fail. */
  otherCaCert: string;
  serverCert: string;
  serverKey: string;
  clientCert: string;
  clientKey: string;
}

function openssl(args: string[], cwd: string): void {
  execFileSync('openssl', args, { cwd, stdio: ['ignore', 'ignore', 'pipe'] });
}

/** A CA, a server certificate for 127.0.0.1/localhost and a client certificate signed by it, and an unrelated CA. */
export function makeTestPki(dir: string): TestPki {
  mkdirSync(dir, { recursive: true });
  const path = (name: string) => join(dir, name);
  const ca = (name: string, subject: string) =>
    openssl(
      [
        'req',
        '-x509',
        '-newkey',
        'ec',
        '-pkeyopt',
        'ec_paramgen_curve:P-256',
        '-nodes',
        '-keyout',
        `${name}.key`,
        '-out',
        `${name}.crt`,
        '-days',
        '2',
        '-subj',
        subject,
        '-addext',
        'basicConstraints=critical,CA:TRUE',
        '-addext',
        'keyUsage=critical,keyCertSign,cRLSign',
      ],
      dir,
    );
  ca('ca', '/CN=wavegate test CA');
  ca('other-ca', '/CN=an unrelated CA');
  const leaf = (name: string, subject: string, ext: string) => {
    writeFileSync(path(`${name}.ext`), ext);
    openssl(
      [
        'req',
        '-newkey',
        'ec',
        '-pkeyopt',
        'ec_paramgen_curve:P-256',
        '-nodes',
        '-keyout',
        `${name}.key`,
        '-out',
        `${name}.csr`,
        '-subj',
        subject,
      ],
      dir,
    );
    openssl(
      [
        'x509',
        '-req',
        '-in',
        `${name}.csr`,
        '-CA',
        'ca.crt',
        '-CAkey',
        'ca.key',
        '-CAcreateserial',
        '-out',
        `${name}.crt`,
        '-days',
        '2',
        '-extfile',
        `${name}.ext`,
      ],
      dir,
    );
  };
  leaf(
    'server',
    '/CN=127.0.0.1',
    'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n',
  );
  leaf(
    'client',
    '/CN=wavegate worker',
    'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n',
  );
  return {
    caCert: path('ca.crt'),
    otherCaCert: path('other-ca.crt'),
    serverCert: path('server.crt'),
    serverKey: path('server.key'),
    clientCert: path('client.crt'),
    clientKey: path('client.key'),
  };
}

export interface TlsProxy {
  /** `127.0.0.1:<port>`: where clients connect with TLS. */
  address: string;
  /** nginx's error log, for a failing test's message. */
  errorLog(): string;
  stop(): Promise<void>;
}

function nginxConfig(opts: {
  prefix: string;
  port: number;
  upstream: string;
  pki: TestPki;
  verifyClient: boolean;
}): string {
  const { prefix, pki } = opts;
  return `# written by test/support/tls-proxy.ts
${process.getuid?.() === 0 ? 'user root;' : ''}
worker_processes 1;
pid ${join(prefix, 'nginx.pid')};
error_log ${join(prefix, 'error.log')} info;
events { worker_connections 256; }
http {
  access_log ${join(prefix, 'access.log')};
  client_body_temp_path ${join(prefix, 'tmp', 'body')};
  proxy_temp_path ${join(prefix, 'tmp', 'proxy')};
  fastcgi_temp_path ${join(prefix, 'tmp', 'fastcgi')};
  uwsgi_temp_path ${join(prefix, 'tmp', 'uwsgi')};
  scgi_temp_path ${join(prefix, 'tmp', 'scgi')};
  server {
    listen 127.0.0.1:${opts.port} ssl http2;
    ssl_certificate ${pki.serverCert};
    ssl_certificate_key ${pki.serverKey};
    ssl_protocols TLSv1.2 TLSv1.3;
${opts.verifyClient ? `    ssl_client_certificate ${pki.caCert};\n    ssl_verify_client on;\n` : ''}    # Workers long-poll for tasks (about a minute): the proxy must outwait them.
    grpc_read_timeout 300s;
    grpc_send_timeout 300s;
    client_max_body_size 0;
    location / {
      grpc_pass grpc://${opts.upstream};
    }
  }
}
`;
}

async function listening(port: number, timeoutMs: number, exited: () => boolean): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (exited()) throw new Error('nginx exited during start-up');
    const ok = await new Promise<boolean>((resolve) => {
      const s = connect(port, '127.0.0.1');
      s.once('connect', () => {
        s.destroy();
        resolve(true);
      });
      s.once('error', () => resolve(false));
    });
    if (ok) return;
    if (Date.now() > deadline) throw new Error(`nginx did not listen on 127.0.0.1:${port} within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** nginx in the foreground (`daemon off`), a child of the test: stop() ends it, SIGKILL after 5 s. */
export async function startTlsProxy(opts: {
  dir: string;
  upstream: string;
  pki: TestPki;
  verifyClient: boolean;
}): Promise<TlsProxy> {
  const prefix = opts.dir;
  mkdirSync(join(prefix, 'tmp'), { recursive: true });
  const port = await freePort();
  const conf = join(prefix, 'nginx.conf');
  writeFileSync(
    conf,
    nginxConfig({ prefix, port, upstream: opts.upstream, pki: opts.pki, verifyClient: opts.verifyClient }),
  );
  const child: ChildProcess = spawn(
    'nginx',
    ['-p', prefix, '-c', conf, '-e', join(prefix, 'error.log'), '-g', 'daemon off;'],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  let stderr = '';
  child.stderr!.on('data', (c: Buffer) => (stderr += c.toString()));
  let exited = false;
  child.once('exit', () => (exited = true));
  const errorLog = () => {
    try {
      return readFileSync(join(prefix, 'error.log'), 'utf8');
    } catch {
      return '';
    }
  };
  try {
    await listening(port, 10_000, () => exited);
  } catch (err) {
    if (!exited) child.kill('SIGKILL');
    throw new Error(`${(err as Error).message}\n${stderr}\n${errorLog()}`);
  }
  return {
    address: `127.0.0.1:${port}`,
    errorLog,
    async stop() {
      if (exited) return;
      const done = new Promise<void>((r) => child.once('exit', () => r()));
      child.kill('SIGTERM'); // nginx's fast stop (a graceful one would outwait the workers' long polls); the master takes its worker with it
      const timer = setTimeout(() => !exited && child.kill('SIGKILL'), 5_000);
      await done;
      clearTimeout(timer);
    },
  };
}
