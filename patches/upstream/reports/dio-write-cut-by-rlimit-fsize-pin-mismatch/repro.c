/*
 * dio-write-cut-by-rlimit-fsize-pin-mismatch: the trigger.
 *
 * Under RLIMIT_FSIZE = 1 MiB (SIGXFSZ ignored), one 2 MiB O_DIRECT write at
 * offset 0 of an empty file, submitted with libaio (default), or with plain
 * pwrite/pwritev (mode "sync"). The kernel cuts the iterator to 1 MiB before
 * ZFS sees it (generic_write_checks -> iov_iter_truncate); ZFS pins the pages
 * of the uncut segment(s): on a debug build VERIFY0(len) fails in
 * zfs_uio_pin_user_pages and the writing thread hangs for good.
 * A correct kernel module returns 1 MiB.
 *
 * Usage: repro FILE [libaio|sync] [SEGMENTS]   (SEGMENTS 1, or 16 x 128 KiB)
 * cc -O2 -o repro repro.c -laio
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <libaio.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/uio.h>
#include <unistd.h>

#define MIB (1 << 20)

int main(int argc, char **argv)
{
	const char *mode = argc > 2 ? argv[2] : "libaio";
	int nseg = argc > 3 ? atoi(argv[3]) : 1;
	struct rlimit rl = { MIB, MIB };
	struct iovec iov[16];
	char *buf;
	long res;
	int fd;

	if (argc < 2 || nseg < 1 || nseg > 16) {
		fprintf(stderr, "usage: %s FILE [libaio|sync] [1|16]\n", argv[0]);
		return 2;
	}
	if (posix_memalign((void **)&buf, 4096, 2 * MIB)) return 2;
	memset(buf, 0x5a, 2 * MIB);
	for (int i = 0; i < nseg; i++) {
		iov[i].iov_base = buf + (size_t)i * (2 * MIB / nseg);
		iov[i].iov_len = 2 * MIB / nseg;
	}
	fd = open(argv[1], O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0644);
	if (fd < 0) { perror(argv[1]); return 2; }
	signal(SIGXFSZ, SIG_IGN);
	if (setrlimit(RLIMIT_FSIZE, &rl)) { perror("setrlimit"); return 2; }
	printf("%s write of 2 MiB in %d segment(s) at 0, O_DIRECT, RLIMIT_FSIZE 1 MiB\n", mode, nseg);
	fflush(stdout);

	if (strcmp(mode, "sync") == 0) {
		res = nseg == 1 ? pwrite(fd, buf, 2 * MIB, 0) : pwritev(fd, iov, nseg, 0);
		if (res < 0) res = -errno;
	} else {
		io_context_t ctx = 0;
		struct iocb cb, *cbs[1] = { &cb };
		struct io_event ev;
		if (io_setup(1, &ctx)) { fprintf(stderr, "io_setup failed\n"); return 2; }
		if (nseg == 1) io_prep_pwrite(&cb, fd, buf, 2 * MIB, 0);
		else io_prep_pwritev(&cb, fd, iov, nseg, 0);
		if ((res = io_submit(ctx, 1, cbs)) == 1) {
			if (io_getevents(ctx, 1, 1, &ev, NULL) != 1) { fprintf(stderr, "io_getevents failed\n"); return 2; }
			res = (long)ev.res;
		}
	}
	printf("write returned %ld (%s); st_size %ld\n", res, res < 0 ? strerror((int)-res) : "bytes",
	       (long)lseek(fd, 0, SEEK_END));
	return res == MIB ? 0 : 3;
}
