"""Who may join the course's Dask cluster: machines holding a certificate of the course's own CA (issue 34, item 6).

A plain `tcp://` Dask cluster has no authentication: anyone who can reach the scheduler's port can join as a worker,
be sent classmates' submissions and hand back graded notebooks. So the cluster runs on TLS with mutual
authentication: `make cluster-certificates` (`python -m qkv_autograde.grading.cluster_security` in autograde/)
writes a CA of the course and, signed by it, a certificate and key for the scheduler, the workers and the grader
(the client) into autograde/cluster/ (git-ignored: keys are never committed). Every side verifies the other's
certificate against the course's CA and refuses an unencrypted connection, so a worker without a certificate of that CA
cannot join.

`make grade SCHEDULER=tls://host:8786` needs nothing more: the grader reads its client certificate from
autograde/cluster/. It refuses a `tcp://` scheduler (or one without a protocol, which Dask takes for tcp) unless
the instructor opts out by name: INSECURE_SCHEDULER=1 (`--insecure-scheduler`).
"""
import argparse
import os
import secrets
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FOLDER = os.path.join(HERE, "cluster")
ROLES = ("scheduler", "worker", "client")
OPT_OUT = "INSECURE_SCHEDULER"
DAYS = 825  # certificates: a little over two years (what browsers accept); the CA: ten years
CURVE = "prime256v1"  # P-256: a key in milliseconds, accepted by every TLS library Dask may meet


def files(folder=FOLDER):
    """The files of the course's cluster, by name: `ca` (the CA's certificate), `ca_key`, and `<role>`,
    `<role>_key` for every role."""
    out = {"ca": os.path.join(folder, "ca.pem"), "ca_key": os.path.join(folder, "ca.key")}
    for role in ROLES:
        out[role] = os.path.join(folder, f"{role}.pem")
        out[f"{role}_key"] = os.path.join(folder, f"{role}.key")
    return out


def _openssl(*args):
    done = subprocess.run(["openssl", *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"qkv cluster certificates: openssl {args[0]} failed: {done.stderr.strip()}")


def make_certificates(folder=FOLDER, force=False, out=sys.stdout):
    """Write the course's CA and the scheduler's, workers' and client's certificates and keys into `folder`
    (readable by this user only). Refuses to replace existing ones without `force`: the running scheduler and
    workers hold the old ones, and a new CA locks them out."""
    paths = files(folder)
    if os.path.exists(paths["ca"]) and not force:
        raise SystemExit(f"qkv cluster certificates: {folder} already holds the course's CA; a new one would lock "
                         "out every machine that has the old certificates. Replace them all with FORCE=1 "
                         "(make cluster-certificates FORCE=1).")
    os.makedirs(folder, mode=0o700, exist_ok=True)
    os.chmod(folder, 0o700)
    old_umask = os.umask(0o077)  # keys are born readable by this user only
    try:
        _openssl("req", "-x509", "-new", "-newkey", "ec", "-pkeyopt", f"ec_paramgen_curve:{CURVE}", "-nodes",
                 "-keyout", paths["ca_key"], "-out", paths["ca"], "-days", "3650", "-sha256",
                 "-subj", "/O=qkv course/CN=qkv course Dask CA",
                 "-addext", "basicConstraints=critical,CA:TRUE,pathlen:0",
                 "-addext", "keyUsage=critical,keyCertSign,cRLSign")
        with tempfile.TemporaryDirectory(dir=folder) as scratch:
            extensions = os.path.join(scratch, "leaf.ext")
            with open(extensions, "w") as ext:
                # scheduler and workers both listen and connect (workers talk to each other): both usages
                ext.write("basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyAgreement\n"
                          "extendedKeyUsage=serverAuth,clientAuth\n")
            for role in ROLES:
                request = os.path.join(scratch, f"{role}.csr")
                _openssl("req", "-new", "-newkey", "ec", "-pkeyopt", f"ec_paramgen_curve:{CURVE}", "-nodes",
                         "-keyout", paths[f"{role}_key"], "-out", request, "-subj", f"/O=qkv course/CN=qkv {role}")
                _openssl("x509", "-req", "-in", request, "-CA", paths["ca"], "-CAkey", paths["ca_key"],
                         "-set_serial", f"0x{secrets.token_hex(16)}", "-days", str(DAYS), "-sha256",
                         "-extfile", extensions, "-out", paths[role])
    finally:
        os.umask(old_umask)
    print(f"qkv cluster certificates: the course's CA and the scheduler's, workers' and grader's certificates are in "
          f"{folder}\n  scheduler machine: ca.pem scheduler.pem scheduler.key\n"
          f"  every worker machine: ca.pem worker.pem worker.key\n"
          f"  ca.key and client.key stay on the machine that runs make grade", file=out)
    return paths


def _opted_out(insecure):
    return bool(insecure) or os.environ.get(OPT_OUT, "").strip().lower() not in ("", "0", "no", "false")


def client_security(address, insecure=False, folder=FOLDER):
    """The `distributed.Security` the grader connects to `address` with: the course's client certificate, mutual
    TLS, encryption required. None for a `tcp://` scheduler the instructor opted into by name; any other plain
    address stops the run with the reason."""
    protocol = address.split("://", 1)[0].lower() if "://" in address else "tcp"
    if protocol == "tls":
        paths = files(folder)
        missing = [paths[name] for name in ("ca", "client", "client_key") if not os.path.exists(paths[name])]
        if missing:
            raise SystemExit(f"qkv grader: no certificate of the course to reach the Dask scheduler at {address} "
                             f"(missing {', '.join(missing)}): run `make cluster-certificates` and start the "
                             "scheduler and workers with them (README, 'Thousands of students')")
        from distributed import Security

        return Security(tls_ca_file=paths["ca"], tls_client_cert=paths["client"], tls_client_key=paths["client_key"],
                        require_encryption=True)
    if protocol == "tcp" and _opted_out(insecure):
        return None
    if protocol == "tcp":
        raise SystemExit(
            f"qkv grader: refusing the plain-TCP Dask scheduler {address}: it has no authentication, so anyone who "
            "can reach its port can join as a worker, read the class's submissions and hand back graded notebooks. "
            "Run the cluster on TLS with the course's certificates (`make cluster-certificates`, then "
            "SCHEDULER=tls://host:8786; README, 'Thousands of students'), or, on a network nobody else can reach, "
            f"opt out by name: {OPT_OUT}=1 (--insecure-scheduler).")
    raise SystemExit(f"qkv grader: a Dask scheduler address must start with tls:// (the course's certificates) or, "
                     f"opted out with {OPT_OUT}=1, tcp://; not {address}")


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m qkv_autograde.grading.cluster_security",
                                     description="Write the course's Dask CA and certificates "
                                     "(make cluster-certificates).")
    parser.add_argument("--folder", default=FOLDER, help=f"where to write them (default: {FOLDER})")
    parser.add_argument("--force", action="store_true", help="replace existing ones (locks out the old machines)")
    args = parser.parse_args(argv)
    make_certificates(os.path.abspath(args.folder), force=args.force)


if __name__ == "__main__":
    main()
