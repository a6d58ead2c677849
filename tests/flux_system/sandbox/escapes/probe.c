/*
 * Escape probe: the attack payloads of the sandbox escape suite, in one static binary.
 *
 * Why C, compiled at test time (gcc -static): the sandbox shows only a minimal system
 * view, so no interpreter can be assumed inside it (the test interpreter may live under
 * a home directory the sandbox hides, or the unprivileged user cannot read); a static
 * binary needs no loader or library from the view, and raw syscalls (io_uring_setup,
 * clone(CLONE_NEWUSER), clone3, an ioctl number with its high bits set, exotic socket
 * families) are called as they are, not through a runtime that might refuse them first.
 *
 * Usage: probe SPEC...   where SPEC is "[label:]case[=arg1|arg2|...]".
 * Every case runs in its own forked child, and every attack step ("op") inside it in a
 * grandchild, so that a step killed by seccomp or hanging (alarm) cannot hide the
 * others. One JSON line per case on stdout:
 *   {"case":"...","ops":{"op":"ok"|"EPERM"|"killed:31"|"timeout",...},"info":{...}}
 * "ok" means the step did what the attack wanted; anything else names how it failed.
 * The harness decides what counts as an escape (and checks the host side too).
 *
 * One file on purpose (over the usual module size): one static binary carries every
 * attack, so each sandboxed run execs a single payload, whatever the case mix.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <linux/io_uring.h>
#include <linux/keyctl.h>
#include <linux/perf_event.h>
#include <linux/netlink.h>
#include <linux/sched.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ipc.h>
#include <sys/msg.h>
#include <sys/shm.h>
#include <sys/resource.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#define MAX_ARGS 16
#define OP_TIMEOUT_S 10 /* hang guard per step; no step needs more than a few ms */
#define MAX_INITIAL_FDS 64

static char *args[MAX_ARGS];
static int nargs;
static int first_op;
static int initial_fds[MAX_INITIAL_FDS];
static int n_initial_fds;

/* ---- output ------------------------------------------------------------------- */

static void json_str(const char *s) {
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c < 0x20 || c >= 0x7f) printf("\\u%04x", c);
        else putchar(c);
    }
    putchar('"');
}

static void begin_case(const char *name) {
    printf("{\"case\":");
    json_str(name);
    printf(",\"ops\":{");
    first_op = 1;
    fflush(stdout);
}

static void emit_op(const char *name, const char *status) {
    printf("%s", first_op ? "" : ",");
    first_op = 0;
    json_str(name);
    putchar(':');
    json_str(status);
    fflush(stdout);
}

static void end_case(const char *info_json) {
    printf("},\"info\":%s}\n", info_json ? info_json : "{}");
    fflush(stdout);
}

static const char *errname(int e) {
    static char buf[32];
    const char *n = strerrorname_np(e);
    if (n) return n;
    snprintf(buf, sizeof buf, "E%d", e);
    return buf;
}

/* ---- one isolated step -------------------------------------------------------- */

/* fn returns 0 for "the attack step worked", or an errno; it may write a detail. */
typedef int (*op_fn)(void *arg, char *detail, size_t len);

static void run_op(const char *name, op_fn fn, void *arg) {
    int p[2];
    char buf[512] = {0};
    if (pipe(p) != 0) { emit_op(name, "harness:pipe"); return; }
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) { close(p[0]); close(p[1]); emit_op(name, "harness:fork"); return; }
    if (pid == 0) {
        close(p[0]);
        alarm(OP_TIMEOUT_S);
        char detail[400] = {0};
        int rc = fn(arg, detail, sizeof detail);
        char out[512];
        if (rc == 0) snprintf(out, sizeof out, "ok%s%s", detail[0] ? ":" : "", detail);
        else snprintf(out, sizeof out, "%s%s%s", errname(rc), detail[0] ? ":" : "", detail);
        ssize_t w = write(p[1], out, strlen(out));
        (void)w;
        _exit(0);
    }
    close(p[1]);
    size_t got = 0;
    for (;;) {
        ssize_t r = read(p[0], buf + got, sizeof buf - 1 - got);
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(p[0]);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
    if (WIFSIGNALED(st)) {
        char out[32];
        snprintf(out, sizeof out, WTERMSIG(st) == SIGALRM ? "timeout" : "killed:%d",
                 WTERMSIG(st));
        emit_op(name, out);
    } else if (got == 0) {
        emit_op(name, "harness:no-output");
    } else {
        emit_op(name, buf);
    }
}

static int arg_int(int i) { return i < nargs ? atoi(args[i]) : 0; }

/* A secret to look for arrives reversed, so that it never appears in any argv (the
 * probe's own /proc/N/cmdline would otherwise hold it and "find" it). */
static const char *needle(int i) {
    static char buf[MAX_ARGS][128];
    const char *s = i < nargs ? args[i] : "";
    size_t l = strlen(s);
    if (l >= sizeof buf[0]) l = sizeof buf[0] - 1;
    for (size_t k = 0; k < l; k++) buf[i][k] = s[l - 1 - k];
    buf[i][l] = 0;
    return buf[i];
}
static const char *arg_str(int i) { return i < nargs ? args[i] : ""; }

/* ---- filesystem ---------------------------------------------------------------- */

static char path_buf[4096];

static const char *join(const char *dir, const char *name) {
    snprintf(path_buf, sizeof path_buf, "%s/%s", dir, name);
    return path_buf;
}

static int write_file(const char *path, int flags, const char *data) {
    int fd = open(path, flags | O_WRONLY | O_CLOEXEC, 0644);
    if (fd < 0) return errno;
    ssize_t w = write(fd, data, strlen(data));
    int e = w < 0 ? errno : 0;
    close(fd);
    return e;
}

static int op_create(void *a, char *d, size_t n) { (void)d; (void)n;
    return write_file(join(a, "planted"), O_CREAT | O_EXCL, "escaped\n"); }
static int op_append(void *a, char *d, size_t n) { (void)d; (void)n;
    return write_file(join(a, "canary"), O_APPEND, "escaped\n"); }
static int op_truncate(void *a, char *d, size_t n) { (void)d; (void)n;
    return truncate(join(a, "canary"), 0) ? errno : 0; }
static int op_unlink(void *a, char *d, size_t n) { (void)d; (void)n;
    return unlink(join(a, "victim")) ? errno : 0; }
static int op_mkdir(void *a, char *d, size_t n) { (void)d; (void)n;
    return mkdir(join(a, "planted-dir"), 0755) ? errno : 0; }
static int op_rename(void *a, char *d, size_t n) { (void)d; (void)n;
    char from[4096];
    snprintf(from, sizeof from, "%s/victim2", (char *)a);
    return rename(from, join(a, "renamed")) ? errno : 0; }
static int op_symlink(void *a, char *d, size_t n) { (void)d; (void)n;
    return symlink("/", join(a, "planted-link")) ? errno : 0; }
static int op_chmod(void *a, char *d, size_t n) { (void)d; (void)n;
    return chmod(join(a, "canary"), 0777) ? errno : 0; }
/* Metadata writes: Landlock (ABI 7) has no right for these, so only a view that hides
 * the file, or a filter, stops them. */
static int op_utimes(void *a, char *d, size_t n) { (void)d; (void)n;
    struct timespec ts[2] = {{0, 0}, {0, 0}};
    return utimensat(AT_FDCWD, join(a, "canary"), ts, 0) ? errno : 0; }
static int op_chown(void *a, char *d, size_t n) { (void)d; (void)n;
    return chown(join(a, "canary"), getuid(), getgid()) ? errno : 0; }
static int op_setxattr(void *a, char *d, size_t n) { (void)d; (void)n;
    return setxattr(join(a, "canary"), "user.flux-escape", "1", 1, 0) ? errno : 0; }
/* Hard-link an outside file into the workspace (the cwd), then write through the link:
 * the inode is outside even if the name is inside (Landlock's REFER right). */
static int op_hardlink(void *a, char *d, size_t n) {
    char link_name[64];
    snprintf(link_name, sizeof link_name, "./.flux-hardlink-%d", (int)getpid());
    if (link(join(a, "canary"), link_name) != 0) { int e = errno; snprintf(d, n, "link"); return e; }
    int e = write_file(link_name, O_APPEND, "escaped via hard link\n");
    unlink(link_name);
    return e;
}

/* Create a file in the workspace and rename it out (creation outside by other means). */
static int op_rename_out(void *a, char *d, size_t n) {
    char src[64];
    snprintf(src, sizeof src, "./.flux-rename-out-%d", (int)getpid());
    int e = write_file(src, O_CREAT | O_EXCL, "escaped by rename\n");
    if (e) { snprintf(d, n, "create inside"); return e; }
    e = rename(src, join(a, "renamed-out")) ? errno : 0;
    unlink(src);
    return e;
}

static int op_mkfifo(void *a, char *d, size_t n) { (void)d; (void)n;
    return mkfifo(join(a, "planted-fifo"), 0644) ? errno : 0; }

/* fs-write=DIR: DIR "$HOME" is the home the sandbox gives the payload. */
static void case_fs_write(void) {
    char *dir = (char *)arg_str(0);
    if (strcmp(dir, "$HOME") == 0) dir = getenv("HOME") ? getenv("HOME") : "/nonexistent";
    run_op("create", op_create, dir);
    run_op("append", op_append, dir);
    run_op("truncate", op_truncate, dir);
    run_op("unlink", op_unlink, dir);
    run_op("mkdir", op_mkdir, dir);
    run_op("rename", op_rename, dir);
    run_op("symlink", op_symlink, dir);
    run_op("mkfifo", op_mkfifo, dir);
    run_op("hardlink", op_hardlink, dir);
    run_op("rename-out", op_rename_out, dir);
}

/* fs-meta=DIR: metadata writes on DIR/canary (a file the caller owns). */
static void case_fs_meta(void) {
    char *dir = (char *)arg_str(0);
    run_op("chmod", op_chmod, dir);
    run_op("utimes", op_utimes, dir);
    run_op("chown", op_chown, dir);
    run_op("setxattr", op_setxattr, dir);
}

/* Read *path*; "ok" only when the content holds the token (the secret was read). */
static int read_for_token(const char *path, const char *token, char *d, size_t n) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno;
    static char buf[1 << 16];
    ssize_t r = read(fd, buf, sizeof buf - 1);
    int e = r < 0 ? errno : 0;
    close(fd);
    if (e) return e;
    buf[r] = 0;
    for (ssize_t i = 0; i < r; i++) if (!buf[i]) buf[i] = '\n';
    if (token[0] && strstr(buf, token)) return 0;
    if (!token[0] && r > 0) return 0;
    snprintf(d, n, "read %zd bytes without the secret", r);
    return ENODATA;
}

struct tokpath { const char *path; const char *token; };

static int op_read(void *a, char *d, size_t n) {
    struct tokpath *tp = a;
    return read_for_token(tp->path, tp->token, d, n);
}

/* secret-read=TOKEN|path1|path2...: each path is one op named by its index. */
static void case_secret_read(void) {
    const char *token = needle(0);
    for (int i = 1; i < nargs; i++) {
        /* /proc/keys lists the keyrings the caller may view; a user's keyring exists
         * once anything asked for it (a login's pam_keyinit, or this): make sure one
         * does, as an attacker may, so the read has something to show. Refused inside
         * the sandbox (seccomp) or not, the read below is what is judged. */
        if (strcmp(args[i], "/proc/keys") == 0)
            (void)syscall(SYS_keyctl, KEYCTL_GET_KEYRING_ID, KEY_SPEC_USER_KEYRING, 1);
        struct tokpath tp = {args[i], token};
        char name[32];
        snprintf(name, sizeof name, "path%d", i);
        run_op(name, op_read, &tp);
    }
    /* $HOME as the sandbox sets it: a fresh home must not hold the host's keys. */
    const char *home = getenv("HOME");
    if (home) {
        char p[4096];
        snprintf(p, sizeof p, "%s/.ssh/id_ed25519", home);
        struct tokpath tp = {p, token};
        run_op("env-home", op_read, &tp);
    }
}

/* proc-environ=TOKEN|pid...: read /proc/PID/environ and cmdline for the token, for
 * each pid given, for pid 1 and the parent, then every /proc/N/environ visible. */
static void case_proc_environ(void) {
    const char *token = needle(0);
    char p[320], name[64];
    int pids[MAX_ARGS + 2], np = 0;
    for (int i = 1; i < nargs; i++) pids[np++] = atoi(args[i]);
    pids[np++] = 1;
    pids[np++] = (int)getppid();
    for (int i = 0; i < np; i++) {
        const char *what[] = {"environ", "cmdline"};
        for (int w = 0; w < 2; w++) {
            snprintf(p, sizeof p, "/proc/%d/%s", pids[i], what[w]);
            if (i < np - 2) snprintf(name, sizeof name, "host%d:%s", i, what[w]);
            else snprintf(name, sizeof name, "%s:%s", i == np - 2 ? "pid1" : "ppid", what[w]);
            struct tokpath tp = {p, token};
            run_op(name, op_read, &tp);
        }
    }
    /* Scan: any visible process's environ holding the token. */
    DIR *dir = opendir("/proc");
    int found = 0, scanned = 0;
    if (dir) {
        struct dirent *de;
        while ((de = readdir(dir))) {
            if (de->d_name[0] < '0' || de->d_name[0] > '9') continue;
            snprintf(p, sizeof p, "/proc/%s/environ", de->d_name);
            char d[8];
            scanned++;
            if (read_for_token(p, token, d, sizeof d) == 0) found++;
        }
        closedir(dir);
    }
    emit_op("scan", found ? "ok" : "ENOENT");
    char info[96];
    snprintf(info, sizeof info, "{\"scanned\":%d,\"found\":%d}", scanned, found);
    end_case(info);
}

/* ---- processes ----------------------------------------------------------------- */

static int op_ptrace_pid(void *a, char *d, size_t n) {
    pid_t pid = (pid_t)(intptr_t)a;
    snprintf(d, n, "pid %d", (int)pid);
    if (pid <= 0) return ESRCH;
    if (ptrace(PTRACE_ATTACH, pid, 0, 0) != 0) return errno;
    waitpid(pid, NULL, __WALL);
    ptrace(PTRACE_DETACH, pid, 0, 0);
    return 0;
}

static int op_ptrace_child(void *a, char *d, size_t n) { (void)a; (void)d; (void)n;
    pid_t c = fork();
    if (c < 0) return errno;
    if (c == 0) { pause(); _exit(0); }
    int e = ptrace(PTRACE_ATTACH, c, 0, 0) ? errno : 0;
    kill(c, SIGKILL);
    waitpid(c, NULL, __WALL);
    return e;
}

static int op_vm_read(void *a, char *d, size_t n) { (void)d; (void)n;
    pid_t pid = (pid_t)(intptr_t)a;
    char buf[16];
    struct iovec local = {buf, sizeof buf};
    struct iovec remote = {(void *)0x400000, sizeof buf};
    if (pid <= 0) return ESRCH;
    if (syscall(SYS_process_vm_readv, pid, &local, 1, &remote, 1, 0) < 0 && errno != EFAULT)
        return errno;
    return 0; /* EFAULT: the call was admitted, only the address was wrong */
}

static void case_ptrace(void) {
    intptr_t victim = arg_int(0);
    run_op("attach-parent", op_ptrace_pid, (void *)(intptr_t)getppid());
    run_op("attach-host", op_ptrace_pid, (void *)victim);
    run_op("attach-own-child", op_ptrace_child, NULL);
    run_op("vm-read-host", op_vm_read, (void *)victim);
}

static int op_kill(void *a, char *d, size_t n) { (void)d; (void)n;
    return kill((pid_t)(intptr_t)a, SIGKILL) ? errno : 0; }
static int op_kill0(void *a, char *d, size_t n) { (void)d; (void)n;
    return kill((pid_t)(intptr_t)a, 0) ? errno : 0; }
static int op_pidfd_kill(void *a, char *d, size_t n) { (void)d; (void)n;
    int fd = (int)syscall(SYS_pidfd_open, (pid_t)(intptr_t)a, 0);
    if (fd < 0) return errno;
    int e = syscall(SYS_pidfd_send_signal, fd, SIGKILL, NULL, 0) ? errno : 0;
    close(fd);
    return e;
}

/* signal=PID1|PID2|PID3: three victims, one per way of signalling. */
static void case_signal(void) {
    run_op("kill0", op_kill0, (void *)(intptr_t)arg_int(0));
    run_op("kill", op_kill, (void *)(intptr_t)arg_int(0));
    run_op("killpg", op_kill, (void *)(intptr_t)-arg_int(1));
    run_op("pidfd", op_pidfd_kill, (void *)(intptr_t)arg_int(2));
}

/* limits=PID: change a host process of the same uid without a signal or ptrace: its
 * resource limits (RLIMIT_CPU alone can kill it), nice value, CPU affinity, scheduling
 * policy and I/O priority. Each changes the victim harmlessly (a sleeping process). */
static int op_prlimit(void *a, char *d, size_t n) { (void)d; (void)n;
    struct rlimit r = {0, 0};  /* RLIMIT_NICE: the victim may never raise its priority */
    return syscall(SYS_prlimit64, (long)(intptr_t)a, RLIMIT_NICE, &r, NULL) ? errno : 0; }
static int op_prlimit_high(void *a, char *d, size_t n) { (void)d; (void)n;
    struct rlimit r = {0, 0};  /* the pid with high bits set: the kernel reads an int */
    long pid = (long)(((unsigned long)1 << 32) | (unsigned long)(uint32_t)(intptr_t)a);
    return syscall(SYS_prlimit64, pid, RLIMIT_NICE, &r, NULL) ? errno : 0; }
static int op_setprio(void *a, char *d, size_t n) { (void)d; (void)n;
    return syscall(SYS_setpriority, PRIO_PROCESS, (long)(intptr_t)a, 19) ? errno : 0; }
static int op_affinity(void *a, char *d, size_t n) { (void)d; (void)n;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(0, &set);
    return sched_setaffinity((pid_t)(intptr_t)a, sizeof set, &set) ? errno : 0; }
static int op_sched_idle(void *a, char *d, size_t n) { (void)d; (void)n;
    struct sched_param p = {0};
    return sched_setscheduler((pid_t)(intptr_t)a, SCHED_IDLE, &p) ? errno : 0; }
static int op_ioprio(void *a, char *d, size_t n) { (void)d; (void)n;
    /* IOPRIO_WHO_PROCESS, IOPRIO_PRIO_VALUE(IOPRIO_CLASS_IDLE, 0) */
    return syscall(SYS_ioprio_set, 1, (long)(intptr_t)a, 3 << 13) ? errno : 0; }

static void case_limits(void) {
    void *victim = (void *)(intptr_t)arg_int(0);
    run_op("prlimit", op_prlimit, victim);
    run_op("prlimit-highbits", op_prlimit_high, victim);
    run_op("setpriority", op_setprio, victim);
    run_op("affinity", op_affinity, victim);
    run_op("sched-idle", op_sched_idle, victim);
    run_op("ioprio", op_ioprio, victim);
}

/* ipc=SHMKEY|SHMID|MSGKEY|MSGID: a host process's System V shared memory and message
 * queue (mode 0600, of this uid): look them up by key, attach or read them by id. */
static int op_shm_key(void *a, char *d, size_t n) { (void)d; (void)n;
    return shmget((key_t)(intptr_t)a, 0, 0) < 0 ? errno : 0; }
static int op_shm_attach(void *a, char *d, size_t n) {
    void *p = shmat((int)(intptr_t)a, NULL, SHM_RDONLY);
    if (p == (void *)-1) return errno;
    snprintf(d, n, "read %.4s", (const char *)p);
    shmdt(p);
    return 0;
}
static int op_msg_key(void *a, char *d, size_t n) { (void)d; (void)n;
    return msgget((key_t)(intptr_t)a, 0) < 0 ? errno : 0; }
static int op_msg_read(void *a, char *d, size_t n) {
    struct { long type; char text[128]; } m;
    /* MSG_COPY: look without taking it (needs CONFIG_CHECKPOINT_RESTORE), else take it */
    if (msgrcv((int)(intptr_t)a, &m, sizeof m.text, 0, IPC_NOWAIT | 040000) < 0 &&
        msgrcv((int)(intptr_t)a, &m, sizeof m.text, 0, IPC_NOWAIT) < 0)
        return errno;
    snprintf(d, n, "read %.4s", m.text);
    return 0;
}

static void case_ipc(void) {
    run_op("shm-by-key", op_shm_key, (void *)(intptr_t)arg_int(0));
    run_op("shm-attach", op_shm_attach, (void *)(intptr_t)arg_int(1));
    run_op("msg-by-key", op_msg_key, (void *)(intptr_t)arg_int(2));
    run_op("msg-read", op_msg_read, (void *)(intptr_t)arg_int(3));
}

/* sysctl=NAME|NAME...: write host-global kernel settings below /proc/sys (each gets
 * its own current value back: harmless when it works). A root caller is uid 0 inside;
 * kernel.core_pattern = "|/ws/evil" would run a program as host root on a crash. */
static int op_sysctl(void *a, char *d, size_t n) {
    char path[256], value[512];
    snprintf(path, sizeof path, "/proc/sys/%s", (const char *)a);
    int fd = open(path, O_RDONLY);
    if (fd < 0) { int e = errno; snprintf(d, n, "read"); return e; }
    ssize_t len = read(fd, value, sizeof value);
    close(fd);
    if (len <= 0) { snprintf(d, n, "read"); return len < 0 ? errno : EIO; }
    fd = open(path, O_WRONLY);
    if (fd < 0) return errno;
    int e = write(fd, value, (size_t)len) == len ? 0 : errno;
    close(fd);
    return e;
}

static void case_sysctl(void) {
    for (int i = 0; i < nargs; i++) {
        char label[64];
        snprintf(label, sizeof label, "sysctl:%s", args[i]);
        run_op(label, op_sysctl, (void *)args[i]);
    }
}

/* ---- unix and IP sockets ------------------------------------------------------- */

static int connect_send(int fam, int type, struct sockaddr *sa, socklen_t len, const char *msg) {
    int s = socket(fam, type | SOCK_CLOEXEC, 0);
    if (s < 0) return errno;
    if (type == SOCK_STREAM) {
        struct timeval tv = {3, 0};
        setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        if (connect(s, sa, len) != 0) { int e = errno; close(s); return e; }
        if (send(s, msg, strlen(msg), MSG_NOSIGNAL) < 0) { int e = errno; close(s); return e; }
    } else {
        if (sendto(s, msg, strlen(msg), 0, sa, len) < 0) { int e = errno; close(s); return e; }
    }
    close(s);
    return 0;
}

struct unixdst { const char *spec; const char *msg; };

static int op_unix(void *a, char *d, size_t n) { (void)d; (void)n;
    struct unixdst *t = a;
    const char *spec = t->spec; /* "@name" abstract or a path */
    struct sockaddr_un un = {.sun_family = AF_UNIX};
    socklen_t len;
    if (spec[0] == '@') {
        strncpy(un.sun_path + 1, spec + 1, sizeof un.sun_path - 2);
        len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(spec + 1));
    } else {
        strncpy(un.sun_path, spec, sizeof un.sun_path - 1);
        len = sizeof un;
    }
    return connect_send(AF_UNIX, SOCK_STREAM, (struct sockaddr *)&un, len, t->msg);
}

/* unix=TOKEN|@abstract|/path...: connect to each and send the token. */
static void case_unix(void) {
    for (int i = 1; i < nargs; i++) {
        struct unixdst t = {args[i], arg_str(0)};
        char name[16];
        snprintf(name, sizeof name, "%s%d", args[i][0] == '@' ? "abstract" : "path", i);
        run_op(name, op_unix, &t);
    }
}

struct ipdst { const char *host; int port; int type; const char *msg; };

static int op_ip(void *a, char *d, size_t n) { (void)d; (void)n;
    struct ipdst *t = a;
    struct sockaddr_in in4 = {.sin_family = AF_INET, .sin_port = htons((uint16_t)t->port)};
    struct sockaddr_in6 in6 = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)t->port)};
    if (inet_pton(AF_INET, t->host, &in4.sin_addr) == 1)
        return connect_send(AF_INET, t->type, (struct sockaddr *)&in4, sizeof in4, t->msg);
    if (inet_pton(AF_INET6, t->host, &in6.sin6_addr) == 1)
        return connect_send(AF_INET6, t->type, (struct sockaddr *)&in6, sizeof in6, t->msg);
    return EINVAL;
}

/* tcp=TOKEN|host|port|host|port...  udp=TOKEN|host|port...: one op per destination. */
static void case_ip(int type) {
    const char *token = arg_str(0);
    for (int i = 1; i + 1 < nargs; i += 2) {
        struct ipdst t = {args[i], atoi(args[i + 1]), type, token};
        char name[80];
        snprintf(name, sizeof name, "%s:%s", args[i], args[i + 1]);
        run_op(name, op_ip, &t);
    }
}

/* dns=TOKEN|server|port...: a UDP and a TCP query for TOKEN.escape.test to each
 * server (only the host's recording resolver on loopback: the suite talks to nothing
 * beyond the machine, so the resolv.conf nameservers are not tried). */
static size_t dns_query(unsigned char *q, const char *token) {
    size_t n = 0;
    unsigned char hdr[12] = {0x13, 0x37, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0};
    memcpy(q, hdr, 12);
    n = 12;
    const char *labels[] = {token, "escape", "test"};
    for (int i = 0; i < 3; i++) {
        size_t l = strlen(labels[i]);
        if (l > 63) l = 63;
        q[n++] = (unsigned char)l;
        memcpy(q + n, labels[i], l);
        n += l;
    }
    q[n++] = 0;
    q[n++] = 0; q[n++] = 1; /* A */
    q[n++] = 0; q[n++] = 1; /* IN */
    return n;
}

struct dnsdst { const char *host; int port; int tcp; const char *token; };

static int op_dns(void *a, char *d, size_t n) { (void)d; (void)n;
    struct dnsdst *t = a;
    unsigned char q[300], buf[302];
    size_t len = dns_query(q, t->token);
    struct sockaddr_in in4 = {.sin_family = AF_INET, .sin_port = htons((uint16_t)t->port)};
    struct sockaddr_in6 in6 = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)t->port)};
    struct sockaddr *sa;
    socklen_t sl;
    int fam;
    if (inet_pton(AF_INET, t->host, &in4.sin_addr) == 1) {
        sa = (struct sockaddr *)&in4; sl = sizeof in4; fam = AF_INET;
    } else if (inet_pton(AF_INET6, t->host, &in6.sin6_addr) == 1) {
        sa = (struct sockaddr *)&in6; sl = sizeof in6; fam = AF_INET6;
    } else return EINVAL;
    int s = socket(fam, (t->tcp ? SOCK_STREAM : SOCK_DGRAM) | SOCK_CLOEXEC, 0);
    if (s < 0) return errno;
    struct timeval tv = {2, 0};
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    int e = 0;
    if (t->tcp) {
        buf[0] = (unsigned char)(len >> 8); buf[1] = (unsigned char)len;
        memcpy(buf + 2, q, len);
        if (connect(s, sa, sl) != 0 || send(s, buf, len + 2, MSG_NOSIGNAL) < 0) e = errno;
    } else if (sendto(s, q, len, 0, sa, sl) < 0) {
        e = errno;
    }
    if (!e && recv(s, buf, sizeof buf, 0) <= 0) e = errno ? errno : ENODATA;
    close(s);
    return e; /* "ok" only when an answer came back */
}

static void case_dns(void) {
    const char *token = arg_str(0);
    for (int i = 1; i + 1 < nargs; i += 2) {
        for (int tcp = 0; tcp < 2; tcp++) {
            struct dnsdst t = {args[i], atoi(args[i + 1]), tcp, token};
            char name[80];
            snprintf(name, sizeof name, "%s/%s:%s", tcp ? "tcp" : "udp", args[i], args[i + 1]);
            run_op(name, op_dns, &t);
        }
    }
}

/* ---- HTTP through the proxy ---------------------------------------------------- */

/* http=NAME|request-line-target|method: send one request to the proxy named by
 * $HTTP_PROXY (http://127.0.0.1:PORT) and report the status code. "ok" is a 2xx. */
struct httpreq { const char *method; const char *target; const char *host; };

static int op_http(void *a, char *d, size_t n) {
    struct httpreq *r = a;
    const char *proxy = getenv("HTTP_PROXY");
    if (!proxy) proxy = getenv("http_proxy");
    if (!proxy) { snprintf(d, n, "no HTTP_PROXY"); return ENOENT; }
    char host[256] = {0};
    int port = 0;
    if (sscanf(proxy, "http://%255[^:]:%d", host, &port) != 2) {
        snprintf(d, n, "unparsed proxy"); return EINVAL; }
    struct sockaddr_in in4 = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, host, &in4.sin_addr) != 1) { snprintf(d, n, "proxy host"); return EINVAL; }
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0) return errno;
    struct timeval tv = {5, 0};
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (connect(s, (struct sockaddr *)&in4, sizeof in4) != 0) { int e = errno; close(s); return e; }
    char req[1024];
    int len = snprintf(req, sizeof req, "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n",
                       r->method, r->target, r->host);
    if (send(s, req, (size_t)len, MSG_NOSIGNAL) < 0) { int e = errno; close(s); return e; }
    char buf[256] = {0};
    ssize_t got = recv(s, buf, sizeof buf - 1, 0);
    close(s);
    if (got <= 0) return got < 0 ? errno : ECONNRESET;
    int code = 0;
    sscanf(buf, "HTTP/%*s %d", &code);
    snprintf(d, n, "%d", code);
    return code >= 200 && code < 300 ? 0 : EACCES;
}

/* http=METHOD|target|host|METHOD|target|host... */
static void case_http(void) {
    for (int i = 0; i + 2 < nargs; i += 3) {
        struct httpreq r = {args[i], args[i + 1], args[i + 2]};
        char name[300];
        snprintf(name, sizeof name, "%s %s", args[i], args[i + 1]);
        run_op(name, op_http, &r);
    }
}

/* ---- kernel attack surface ----------------------------------------------------- */

static int op_io_uring(void *a, char *d, size_t n) { (void)a; (void)d; (void)n;
    struct io_uring_params p;
    memset(&p, 0, sizeof p);
    int fd = (int)syscall(SYS_io_uring_setup, 4, &p);
    if (fd < 0) return errno;
    close(fd);
    return 0;
}

static void case_io_uring(void) { run_op("io_uring_setup", op_io_uring, NULL); }

static int op_unshare_user(void *a, char *d, size_t n) { (void)a; (void)d; (void)n;
    return unshare(CLONE_NEWUSER) ? errno : 0; }

static int op_clone_newuser(void *a, char *d, size_t n) { (void)d; (void)n;
    long flags = (long)(intptr_t)a | SIGCHLD;
    long pid = syscall(SYS_clone, flags, 0, 0, 0, 0);
    if (pid < 0) return errno;
    if (pid == 0) _exit(0);
    waitpid((pid_t)pid, NULL, 0);
    return 0;
}

static int op_clone3_newuser(void *a, char *d, size_t n) { (void)a; (void)d; (void)n;
    struct clone_args ca;
    memset(&ca, 0, sizeof ca);
    ca.flags = CLONE_NEWUSER;
    ca.exit_signal = SIGCHLD;
    long pid = syscall(SYS_clone3, &ca, sizeof ca);
    if (pid < 0) return errno;
    if (pid == 0) _exit(0);
    waitpid((pid_t)pid, NULL, 0);
    return 0;
}

static int op_exec_unshare(void *a, char *d, size_t n) { (void)a;
    if (access("/usr/bin/unshare", X_OK) != 0) { snprintf(d, n, "no /usr/bin/unshare"); return ENOENT; }
    pid_t c = fork();
    if (c < 0) return errno;
    if (c == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0) { dup2(devnull, 1); dup2(devnull, 2); }
        execl("/usr/bin/unshare", "unshare", "-U", "/bin/true", (char *)NULL);
        _exit(127);
    }
    int st = 0;
    waitpid(c, &st, 0);
    snprintf(d, n, "exit %d", WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st));
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : EPERM;
}

static void case_userns(void) {
    run_op("unshare(CLONE_NEWUSER)", op_unshare_user, NULL);
    run_op("clone(CLONE_NEWUSER)", op_clone_newuser, (void *)(intptr_t)CLONE_NEWUSER);
    run_op("clone(CLONE_NEWUSER|CLONE_NEWNS)", op_clone_newuser,
           (void *)(intptr_t)(CLONE_NEWUSER | CLONE_NEWNS));
    run_op("clone3(CLONE_NEWUSER)", op_clone3_newuser, NULL);
    run_op("exec unshare -U", op_exec_unshare, NULL);
}

static int op_mount_direct(void *a, char *d, size_t n) { (void)d; (void)n;
    return mount("none", (const char *)a, "tmpfs", 0, NULL) ? errno : 0; }

static int op_mount_userns(void *a, char *d, size_t n) {
    if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) {
        int e = errno; snprintf(d, n, "unshare"); return e; }
    if (mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) {
        int e = errno; snprintf(d, n, "make-private"); return e; }
    return mount("none", (const char *)a, "tmpfs", 0, NULL) ? errno : 0;
}

static int op_umount(void *a, char *d, size_t n) { (void)d; (void)n;
    return umount2((const char *)a, MNT_DETACH) ? errno : 0; }

static int op_fsopen(void *a, char *d, size_t n) { (void)a; (void)d; (void)n;
    int fd = (int)syscall(SYS_fsopen, "tmpfs", 0);
    if (fd < 0) return errno;
    close(fd);
    return 0;
}

/* mount=DIR|UMOUNT_TARGET: DIR is a scratch dir in the workspace; the umount target a
 * read-only bind (a protected path) the sandbox set up, or any mount point. */
static void case_mount(void) {
    run_op("mount tmpfs", op_mount_direct, (void *)arg_str(0));
    run_op("userns+mount tmpfs", op_mount_userns, (void *)arg_str(0));
    run_op("fsopen", op_fsopen, NULL);
    if (nargs > 1) run_op("umount", op_umount, (void *)arg_str(1));
}

struct fam { const char *name; int family, type, proto; };

static int op_socket(void *a, char *d, size_t n) { (void)d; (void)n;
    struct fam *f = a;
    int s = socket(f->family, f->type | SOCK_CLOEXEC, f->proto);
    if (s < 0) return errno;
    close(s);
    return 0;
}

static void case_socket_families(void) {
    static struct fam fams[] = {
        {"AF_PACKET/raw", AF_PACKET, SOCK_RAW, 0},
        {"AF_PACKET/dgram", AF_PACKET, SOCK_DGRAM, 0},
        {"AF_INET/raw", AF_INET, SOCK_RAW, IPPROTO_ICMP},
        {"AF_NETLINK/kobject_uevent", AF_NETLINK, SOCK_RAW, NETLINK_KOBJECT_UEVENT},
        {"AF_NETLINK/audit", AF_NETLINK, SOCK_RAW, NETLINK_AUDIT},
        {"AF_NETLINK/sock_diag", AF_NETLINK, SOCK_RAW, NETLINK_SOCK_DIAG},
        {"AF_NETLINK/generic", AF_NETLINK, SOCK_RAW, NETLINK_GENERIC},
        {"AF_NETLINK/netfilter", AF_NETLINK, SOCK_RAW, NETLINK_NETFILTER},
        {"AF_NETLINK/xfrm", AF_NETLINK, SOCK_RAW, NETLINK_XFRM},
        {"AF_NETLINK/connector", AF_NETLINK, SOCK_DGRAM, NETLINK_CONNECTOR},
        {"AF_VSOCK", AF_VSOCK, SOCK_STREAM, 0},
        {"AF_BLUETOOTH", AF_BLUETOOTH, SOCK_RAW, 1 /* BTPROTO_HCI */},
        {"AF_KEY", AF_KEY, SOCK_RAW, 2 /* PF_KEY_V2 */},
        {"AF_ALG", AF_ALG, SOCK_SEQPACKET, 0},
        {"AF_TIPC", AF_TIPC, SOCK_RDM, 0},
        {"AF_RDS", AF_RDS, SOCK_SEQPACKET, 0},
        {"AF_CAN", AF_CAN, SOCK_RAW, 1 /* CAN_RAW */},
        {"AF_XDP", AF_XDP, SOCK_RAW, 0},
        {"AF_PPPOX", AF_PPPOX, SOCK_STREAM, 0},
        {"AF_LLC", AF_LLC, SOCK_DGRAM, 0},
        {"AF_X25", AF_X25, SOCK_SEQPACKET, 0},
        {"AF_AX25", AF_AX25, SOCK_SEQPACKET, 0},
        {"AF_APPLETALK", AF_APPLETALK, SOCK_DGRAM, 0},
        {"AF_NFC", AF_NFC, SOCK_SEQPACKET, 0},
        {"AF_QIPCRTR", AF_QIPCRTR, SOCK_DGRAM, 0},
        {"AF_SMC", AF_SMC, SOCK_STREAM, 0},
        {"AF_MCTP", 45 /* AF_MCTP */, SOCK_DGRAM, 0},
    };
    for (size_t i = 0; i < sizeof fams / sizeof fams[0]; i++)
        run_op(fams[i].name, op_socket, &fams[i]);
}

/* status: the process's own credentials as the kernel sees them. */
static void case_status(void) {
    FILE *f = fopen("/proc/self/status", "re");
    char line[256];
    char info[1024] = "{";
    size_t off = 1;
    if (f) {
        while (fgets(line, sizeof line, f)) {
            const char *keys[] = {"NoNewPrivs:", "CapEff:", "CapPrm:", "CapInh:", "CapAmb:",
                                  "CapBnd:", "Seccomp:", "Uid:", "Gid:", "Groups:"};
            for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
                size_t kl = strlen(keys[k]);
                if (strncmp(line, keys[k], kl) != 0) continue;
                char *v = line + kl;
                while (*v == ' ' || *v == '\t') v++;
                v[strcspn(v, "\n")] = 0;
                for (char *c = v; *c; c++) if (*c == '\t') *c = ' ';
                off += (size_t)snprintf(info + off, sizeof info - off, "%s\"%.*s\":\"%s\"",
                                        off > 1 ? "," : "", (int)(kl - 1), keys[k], v);
            }
        }
        fclose(f);
    }
    snprintf(info + off, sizeof info - off, "}");
    end_case(info);
}

/* ---- more kernel attack surface: each op "ok" only when the call did its thing ---- */

static int op_keyctl(void *a, char *d, size_t n) { (void)a; (void)d; (void)n;
    long id = syscall(SYS_keyctl, KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0);
    return id < 0 ? errno : 0; }

static int op_add_key(void *a, char *d, size_t n) { (void)a; (void)d; (void)n;
    long id = syscall(SYS_add_key, "user", "flux-escape-probe", "x", 1, KEY_SPEC_PROCESS_KEYRING);
    return id < 0 ? errno : 0; }

static int op_perf(void *a, char *d, size_t n) { (void)a; (void)d; (void)n;
    struct perf_event_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.size = sizeof attr;
    attr.type = PERF_TYPE_SOFTWARE;
    attr.config = PERF_COUNT_SW_TASK_CLOCK;
    attr.exclude_kernel = 1;
    attr.exclude_hv = 1;
    int fd = (int)syscall(SYS_perf_event_open, &attr, 0, -1, -1, 0);
    if (fd < 0) return errno;
    close(fd);
    return 0;
}

static int op_userfaultfd(void *a, char *d, size_t n) { (void)a; (void)d; (void)n;
    int fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | 1 /* UFFD_USER_MODE_ONLY */);
    if (fd < 0) fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC);
    if (fd < 0) return errno;
    close(fd);
    return 0;
}

static int op_bpf(void *a, char *d, size_t n) { (void)a; (void)d; (void)n;
    union bpf_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.map_type = BPF_MAP_TYPE_ARRAY;
    attr.key_size = 4;
    attr.value_size = 4;
    attr.max_entries = 1;
    int fd = (int)syscall(SYS_bpf, BPF_MAP_CREATE, &attr, sizeof attr);
    if (fd < 0) return errno;
    close(fd);
    return 0;
}

/* "Shocker" (Docker, 2014): a file handle opens any inode of the mount, whatever the
 * sandbox's view of paths. */
static int op_open_by_handle(void *a, char *d, size_t n) { (void)a;
    struct { struct file_handle fh; unsigned char buf[MAX_HANDLE_SZ]; } h;
    int mount_id = 0;
    h.fh.handle_bytes = MAX_HANDLE_SZ;
    if (name_to_handle_at(AT_FDCWD, ".", &h.fh, &mount_id, 0) != 0) {
        int e = errno; snprintf(d, n, "name_to_handle_at"); return e; }
    int mfd = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (mfd < 0) return errno;
    int fd = open_by_handle_at(mfd, &h.fh, O_RDONLY | O_CLOEXEC);
    int e = fd < 0 ? errno : 0;
    if (fd >= 0) close(fd);
    close(mfd);
    return e;
}

static int op_setns(void *a, char *d, size_t n) { (void)a; (void)d; (void)n;
    int fd = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno;
    int e = setns(fd, CLONE_NEWNET) ? errno : 0;
    close(fd);
    return e;
}

static void case_kernel_surface(void) {
    run_op("keyctl", op_keyctl, NULL);
    run_op("add_key", op_add_key, NULL);
    run_op("perf_event_open", op_perf, NULL);
    run_op("userfaultfd", op_userfaultfd, NULL);
    run_op("bpf", op_bpf, NULL);
    run_op("open_by_handle_at", op_open_by_handle, NULL);
    run_op("setns", op_setns, NULL);
}

/* ---- foreign architecture: the i386 (int 0x80) and x32 entry points ------------- */

/* A filter that only knows the x86_64 numbers lets these through (i386 numbers differ,
 * and x32 ones carry bit 30): DESIGN 2.5 denies foreign-architecture syscalls. */
static long i386_call(long nr, long a, long b, long c) {
    long ret;
    __asm__ volatile("int $0x80" : "=a"(ret) : "a"(nr), "b"(a), "c"(b), "d"(c) : "memory");
    return ret;
}

static int i386_result(long r) { return r < 0 && r > -4096 ? (int)-r : 0; }

static int op_i386_getpid(void *a, char *d, size_t n) { (void)a; (void)d; (void)n;
    return i386_result(i386_call(20, 0, 0, 0)); }
static int op_i386_unshare(void *a, char *d, size_t n) { (void)a; (void)d; (void)n;
    return i386_result(i386_call(310, CLONE_NEWUSER, 0, 0)); }
static int op_i386_socket(void *a, char *d, size_t n) { (void)a; (void)d; (void)n;
    long fd = i386_call(359, AF_PACKET, SOCK_RAW, 0);
    if (fd >= 0) close((int)fd);
    return i386_result(fd); }
static int op_x32_getpid(void *a, char *d, size_t n) { (void)a; (void)d; (void)n;
    return syscall(0x40000000 | SYS_getpid) < 0 ? errno : 0; }

static void case_foreign_arch(void) {
    run_op("i386 getpid", op_i386_getpid, NULL);
    run_op("i386 unshare(CLONE_NEWUSER)", op_i386_unshare, NULL);
    run_op("i386 socket(AF_PACKET)", op_i386_socket, NULL);
    run_op("x32 getpid", op_x32_getpid, NULL);
}

/* ---- terminals ----------------------------------------------------------------- */

#define TIOCSTI_HIGH ((unsigned long)0xdeadbeef00000000UL | TIOCSTI)

static int op_tiocsti_fd(void *a, char *d, size_t n) { (void)d; (void)n;
    unsigned long cmd = ((intptr_t)a & 0x100) ? TIOCSTI_HIGH : TIOCSTI;
    int fd = (int)((intptr_t)a & 0xff);
    char c = 'x';
    return syscall(SYS_ioctl, fd, cmd, &c) ? errno : 0;
}

/* Open a pty, make its slave the controlling terminal of a new session and push a
 * byte into it with TIOCSTI; "ok" when the byte shows up on the master side. */
static int op_tiocsti_pty(void *a, char *d, size_t n) {
    unsigned long cmd = (intptr_t)a ? TIOCSTI_HIGH : TIOCSTI;
    int m = posix_openpt(O_RDWR | O_NOCTTY);
    if (m < 0) { int e = errno; snprintf(d, n, "posix_openpt"); return e; }
    if (grantpt(m) || unlockpt(m)) { int e = errno; snprintf(d, n, "unlockpt"); return e; }
    char *sname = ptsname(m);
    if (!sname) { snprintf(d, n, "ptsname"); return ENOENT; }
    int p[2];
    if (pipe(p)) return errno;
    pid_t c = fork();
    if (c < 0) return errno;
    if (c == 0) {
        close(p[0]);
        int e = 0;
        if (setsid() < 0) e = errno;
        int s = e ? -1 : open(sname, O_RDWR);
        if (!e && s < 0) e = errno;
        if (!e) { ioctl(s, TIOCSCTTY, 0); char ch = 'Z';
                  if (syscall(SYS_ioctl, s, cmd, &ch)) e = errno; }
        ssize_t w = write(p[1], &e, sizeof e);
        (void)w;
        _exit(0);
    }
    close(p[1]);
    int e = EIO;
    if (read(p[0], &e, sizeof e) != sizeof e) e = EIO;
    close(p[0]);
    waitpid(c, NULL, 0);
    if (e) return e;
    struct pollfd pf = {m, POLLIN, 0};
    char buf[16] = {0};
    if (poll(&pf, 1, 1000) == 1 && read(m, buf, sizeof buf - 1) > 0 && strchr(buf, 'Z'))
        return 0;
    snprintf(d, n, "ioctl admitted, nothing injected");
    return ENODATA;
}

static void case_tiocsti(void) {
    for (int fd = 0; fd < 3; fd++) {
        char name[32];
        snprintf(name, sizeof name, "fd%d", fd);
        run_op(name, op_tiocsti_fd, (void *)(intptr_t)fd);
        snprintf(name, sizeof name, "fd%d-highbits", fd);
        run_op(name, op_tiocsti_fd, (void *)(intptr_t)(fd | 0x100));
    }
    run_op("pty", op_tiocsti_pty, (void *)(intptr_t)0);
    run_op("pty-highbits", op_tiocsti_pty, (void *)(intptr_t)1);
}

/* ---- leftovers: fds, /tmp, daemons, fork bomb ---------------------------------- */

/* fd-leak=TOKEN: every fd the probe found open at start beyond 0/1/2. */
static void case_fd_leak(void) {
    const char *token = needle(0);
    char info[2048] = "{\"fds\":[";
    size_t off = strlen(info);
    for (int i = 0; i < n_initial_fds; i++) {
        int fd = initial_fds[i];
        char p[64], target[256] = {0};
        snprintf(p, sizeof p, "/proc/self/fd/%d", fd);
        ssize_t l = readlink(p, target, sizeof target - 1);
        if (l < 0) strcpy(target, "?");
        off += (size_t)snprintf(info + off, sizeof info - off, "%s[%d,", i ? "," : "", fd);
        char esc[300];
        size_t k = 0;
        for (ssize_t j = 0; j < l && k < sizeof esc - 2; j++)
            if (target[j] != '"' && target[j] != '\\' && target[j] >= 0x20) esc[k++] = target[j];
        esc[k] = 0;
        off += (size_t)snprintf(info + off, sizeof info - off, "\"%s\"]", esc);
        char buf[256] = {0};
        ssize_t r = pread(fd, buf, sizeof buf - 1, 0);
        if (r < 0) r = read(fd, buf, sizeof buf - 1);
        char name[32];
        snprintf(name, sizeof name, "fd%d", fd);
        emit_op(name, r > 0 && token[0] && strstr(buf, token) ? "ok" : "ENODATA");
    }
    emit_op("count", n_initial_fds ? "ok" : "ENOENT");
    snprintf(info + off, sizeof info - off, "]}");
    end_case(info);
}

/* tmp=TOKEN|HOST_CANARY_PATH|HOST_DIR_NAME|PLANT_NAME[|BASE]: BASE is /tmp by default
 * (/dev/shm is the other shared scratch place). */
static const char *tmp_base = "/tmp";

static int op_tmp_list(void *a, char *d, size_t n) { (void)d; (void)n;
    DIR *dir = opendir(tmp_base);
    if (!dir) return errno;
    struct dirent *de;
    int found = 0;
    while ((de = readdir(dir))) if (strcmp(de->d_name, (const char *)a) == 0) found = 1;
    closedir(dir);
    return found ? 0 : ENOENT;
}

static int op_tmp_plant(void *a, char *d, size_t n) { (void)d; (void)n;
    char p[512];
    snprintf(p, sizeof p, "%s/%s", tmp_base, (const char *)a);
    return write_file(p, O_CREAT | O_EXCL, "escaped\n");
}

static void case_tmp(void) {
    if (nargs > 4) tmp_base = arg_str(4);
    struct tokpath tp = {arg_str(1), needle(0)};
    run_op("read-host-file", op_read, &tp);
    run_op("list-host-dir", op_tmp_list, (void *)arg_str(2));
    run_op("plant", op_tmp_plant, (void *)arg_str(3));
}

/* daemon=MARKER|LOCKFILE: detach a grandchild (new session, SIGTERM/SIGHUP ignored,
 * stdio closed) that holds an flock on LOCKFILE and lives until killed. The marker is
 * in argv, so the host finds it in /proc/PID/cmdline. */
static void case_daemon(void) {
    const char *lock = arg_str(1);
    int p[2];
    if (pipe(p) != 0) { emit_op("detach", "harness:pipe"); return; }
    pid_t c = fork();
    if (c == 0) {
        close(p[0]);
        setsid();
        if (fork() != 0) _exit(0);
        signal(SIGTERM, SIG_IGN);
        signal(SIGHUP, SIG_IGN);
        signal(SIGINT, SIG_IGN);
        int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        int e = fd < 0 ? errno : (flock(fd, LOCK_EX) ? errno : 0);
        ssize_t w = write(p[1], &e, sizeof e);
        (void)w;
        int nul = open("/dev/null", O_RDWR);
        dup2(nul, 0); dup2(nul, 1); dup2(nul, 2);
        close(p[1]);
        for (;;) pause();
    }
    close(p[1]);
    int e = EIO;
    if (read(p[0], &e, sizeof e) != sizeof e) e = EIO;
    close(p[0]);
    waitpid(c, NULL, 0);
    emit_op("detach", e ? errname(e) : "ok");
}

/* forkbomb=N: fork children that wait, until N exist or a fork fails. */
#define MAX_BOMB 8192 /* bound of the payload itself, whatever N says */
static pid_t bomb[MAX_BOMB];

static void case_forkbomb(void) {
    int want = arg_int(0);
    if (want > MAX_BOMB) want = MAX_BOMB;
    int made = 0, err = 0;
    for (; made < want; made++) {
        pid_t c = fork();
        if (c < 0) { err = errno; break; }
        if (c == 0) { for (;;) pause(); }
        bomb[made] = c;
    }
    for (int i = 0; i < made; i++) kill(bomb[i], SIGKILL);
    for (int i = 0; i < made; i++) waitpid(bomb[i], NULL, 0);
    char info[96];
    snprintf(info, sizeof info, "{\"made\":%d,\"wanted\":%d}", made, want);
    emit_op("fork-all", made >= want ? "ok" : errname(err));
    end_case(info);
}

/* ---- protected paths (relative to the cwd: the workspace root) --------------------- */

static int op_overwrite(void *a, char *d, size_t n) { (void)d; (void)n;
    return write_file((const char *)a, O_TRUNC, "#!/bin/sh\necho escaped\n"); }
static int op_append_rel(void *a, char *d, size_t n) { (void)d; (void)n;
    return write_file((const char *)a, O_APPEND, "\n# escaped\n"); }
static int op_create_rel(void *a, char *d, size_t n) { (void)d; (void)n;
    return write_file((const char *)a, O_CREAT | O_TRUNC, "escaped\n"); }

/* "dir/file": mkdir dir (may exist), then create file. */
static int op_mkdir_create(void *a, char *d, size_t n) {
    char dir[256];
    snprintf(dir, sizeof dir, "%s", (const char *)a);
    char *slash = strrchr(dir, '/');
    if (slash) { *slash = 0; if (mkdir(dir, 0755) && errno != EEXIST) {
        int e = errno; snprintf(d, n, "mkdir"); return e; } }
    return op_create_rel(a, d, n);
}

/* "a/b/c/file": mkdir -p a/b/c, then create file. */
static int op_mkdirs_create(void *a, char *d, size_t n) {
    char dir[256];
    snprintf(dir, sizeof dir, "%s", (const char *)a);
    for (char *p = strchr(dir + 1, '/'); p; p = strchr(p + 1, '/')) {
        *p = 0;
        if (mkdir(dir, 0755) && errno != EEXIST) { int e = errno; snprintf(d, n, "mkdir %s", dir); return e; }
        *p = '/';
    }
    return op_create_rel(a, d, n);
}

/* "from|sub": rename from -> from-old, then recreate from/sub/... and plant a file. */
static int op_rename_parent(void *a, char *d, size_t n) {
    const char *from = a;
    char old[256], p[512];
    snprintf(old, sizeof old, "%s-old", from);
    if (rename(from, old) != 0) { int e = errno; snprintf(d, n, "rename"); return e; }
    if (mkdir(from, 0755) != 0) { int e = errno; snprintf(d, n, "mkdir"); return e; }
    if (strcmp(from, ".git") == 0) {
        snprintf(p, sizeof p, "%s/hooks", from);
        if (mkdir(p, 0755) != 0) { int e = errno; snprintf(d, n, "mkdir hooks"); return e; }
        snprintf(p, sizeof p, "%s/hooks/pre-commit", from);
    } else {
        snprintf(p, sizeof p, "%s/settings.json", from);
    }
    snprintf(d, n, "renamed");
    return write_file(p, O_CREAT | O_TRUNC, "#!/bin/sh\necho escaped\n");
}

static void case_protected(void) {
    run_op("hook-overwrite", op_overwrite, ".git/hooks/pre-commit");
    run_op("hook-create", op_create_rel, ".git/hooks/post-checkout");
    run_op("git-config-append", op_append_rel, ".git/config");
    run_op("vscode-overwrite", op_overwrite, ".vscode/settings.json");
    run_op("vscode-create", op_create_rel, ".vscode/tasks.json");
    run_op("bashrc-append", op_append_rel, ".bashrc");
    run_op("profile-append", op_append_rel, ".profile");
    run_op("zshrc-create", op_create_rel, ".zshrc");
    run_op("envrc-create", op_create_rel, ".envrc");
    run_op("mcp-create", op_create_rel, ".mcp.json");
    run_op("claude-create", op_mkdir_create, ".claude/settings.json");
    run_op("idea-create", op_mkdir_create, ".idea/workspace.xml");
    /* Git directories that redirect or run code: .git/commondir and config.worktree,
     * a submodule's git dir (name with a slash), a linked worktree's, a new one. */
    run_op("commondir-create", op_create_rel, ".git/commondir");
    run_op("config-worktree-create", op_create_rel, ".git/config.worktree");
    run_op("submodule-hook-overwrite", op_overwrite, ".git/modules/libs/foo/hooks/pre-commit");
    run_op("submodule-hook-create", op_create_rel, ".git/modules/libs/foo/hooks/post-checkout");
    run_op("submodule-config-append", op_append_rel, ".git/modules/libs/foo/config");
    run_op("worktree-commondir-overwrite", op_overwrite, ".git/worktrees/wt1/commondir");
    run_op("worktree-config-create", op_create_rel, ".git/worktrees/wt1/config.worktree");
    run_op("new-submodule-hook", op_mkdirs_create, ".git/modules/evil/hooks/post-checkout");
    run_op("cshrc-create", op_create_rel, ".cshrc");
    run_op("tcshrc-create", op_create_rel, ".tcshrc");
    run_op("kshrc-create", op_create_rel, ".kshrc");
    run_op("inputrc-create", op_create_rel, ".inputrc");
    /* Config that tools run on the host: a dev container's initializeCommand, the
     * pre-commit framework's hooks, an interrupted rebase's todo list (exec lines). */
    run_op("devcontainer-create", op_mkdir_create, ".devcontainer/devcontainer.json");
    run_op("devcontainer-json-create", op_create_rel, ".devcontainer.json");
    run_op("precommit-overwrite", op_overwrite, ".pre-commit-config.yaml");
    run_op("rebase-todo-append", op_append_rel, ".git/rebase-merge/git-rebase-todo");
    run_op("rebase-apply-create", op_mkdir_create, ".git/rebase-apply/git-rebase-todo");
    run_op("worktree-rebase-create", op_mkdir_create,
           ".git/worktrees/wt1/rebase-merge/git-rebase-todo");
    /* Not an attack: git must still work inside (objects, refs and index writable). */
    run_op("objects-writable", op_mkdir_create, ".git/objects/fx/probe");
    run_op("index-writable", op_create_rel, ".git/index");
    run_op("git-rename-parent", op_rename_parent, ".git");
    run_op("vscode-rename-parent", op_rename_parent, ".vscode");
}

/* ---- main ------------------------------------------------------------------------ */

struct entry { const char *name; void (*fn)(void); int self_ends; };

static void case_tcp(void) { case_ip(SOCK_STREAM); }
static void case_udp(void) { case_ip(SOCK_DGRAM); }

static struct entry cases[] = {
    {"fs-write", case_fs_write, 0},
    {"fs-meta", case_fs_meta, 0},
    {"secret-read", case_secret_read, 0},
    {"proc-environ", case_proc_environ, 1},
    {"ptrace", case_ptrace, 0},
    {"signal", case_signal, 0},
    {"limits", case_limits, 0},
    {"ipc", case_ipc, 0},
    {"sysctl", case_sysctl, 0},
    {"unix", case_unix, 0},
    {"tcp", case_tcp, 0},
    {"udp", case_udp, 0},
    {"dns", case_dns, 0},
    {"http", case_http, 0},
    {"io-uring", case_io_uring, 0},
    {"kernel-surface", case_kernel_surface, 0},
    {"foreign-arch", case_foreign_arch, 0},
    {"userns", case_userns, 0},
    {"mount", case_mount, 0},
    {"socket-families", case_socket_families, 0},
    {"status", case_status, 1},
    {"tiocsti", case_tiocsti, 0},
    {"fd-leak", case_fd_leak, 1},
    {"tmp", case_tmp, 0},
    {"daemon", case_daemon, 0},
    {"forkbomb", case_forkbomb, 1},
    {"protected", case_protected, 0},
};

static void split_args(char *spec) {
    nargs = 0;
    char *eq = strchr(spec, '=');
    if (!eq) return;
    *eq = 0;
    char *s = eq + 1;
    for (;;) {
        if (nargs == MAX_ARGS) break;
        args[nargs++] = s;
        char *bar = strchr(s, '|');
        if (!bar) break;
        *bar = 0;
        s = bar + 1;
    }
}

static void record_initial_fds(void) {
    for (int fd = 3; fd < 1024 && n_initial_fds < MAX_INITIAL_FDS; fd++)
        if (fcntl(fd, F_GETFD) >= 0) initial_fds[n_initial_fds++] = fd;
}

int main(int argc, char **argv) {
    record_initial_fds(); /* before this program opens anything of its own */
    setvbuf(stdout, NULL, _IOFBF, 1 << 16);
    signal(SIGPIPE, SIG_IGN);
    for (int i = 1; i < argc; i++) {
        char spec[8192];
        snprintf(spec, sizeof spec, "%s", argv[i]);
        split_args(spec);
        /* "label:case" names the output line "label" (one case may run twice) */
        char *label = spec, *kind = strchr(spec, ':');
        if (kind) *kind++ = 0; else kind = spec;
        struct entry *e = NULL;
        for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
            if (strcmp(cases[k].name, kind) == 0) e = &cases[k];
        if (!e) { fprintf(stderr, "probe: unknown case %s\n", spec); return 2; }
        fflush(stdout);
        pid_t c = fork();
        if (c == 0) {
            setpgid(0, 0);
            alarm(60); /* hang guard for the whole case */
            begin_case(label);
            e->fn();
            if (!e->self_ends) end_case(NULL);
            fflush(stdout);
            _exit(0);
        }
        int st = 0;
        while (c > 0 && waitpid(c, &st, 0) < 0 && errno == EINTR) {}
        if (c < 0 || !WIFEXITED(st)) {
            /* the case process itself died: close its line so the output stays JSON */
            printf("\n{\"case\":\"%s\",\"ops\":{},\"info\":{\"died\":%d}}\n", label,
                   c < 0 ? -1 : WIFSIGNALED(st) ? WTERMSIG(st) : -2);
        }
        fflush(stdout);
    }
    return 0;
}
