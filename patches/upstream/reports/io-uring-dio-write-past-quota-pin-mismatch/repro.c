/*
 * io-uring-dio-write-past-quota-pin-mismatch: the trigger.
 *
 * One 1 MiB O_DIRECT write at offset 0 of an empty file, submitted through
 * io_uring, into a dataset with 64 KiB of quota left (recordsize=128K). The
 * write commits whole records until the quota stops it; io_uring then retries
 * the rest from an io-wq worker, and ZFS pins a different page count than the
 * uio's residual: on a debug build VERIFY0(len) fails in
 * zfs_uio_pin_user_pages and the io-wq worker hangs for good.
 * A correct module completes with a short count (0 < res < 1 MiB), or EDQUOT.
 *
 * Usage: repro FILE
 * cc -O2 -o repro repro.c -luring
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MIB (1 << 20)

int main(int argc, char **argv)
{
	struct io_uring ring;
	struct io_uring_sqe *sqe;
	struct io_uring_cqe *cqe;
	char *buf;
	int fd, ret;

	if (argc < 2) { fprintf(stderr, "usage: %s FILE\n", argv[0]); return 2; }
	if (posix_memalign((void **)&buf, 4096, MIB)) return 2;
	memset(buf, 0x5a, MIB);
	fd = open(argv[1], O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0644);
	if (fd < 0) { perror(argv[1]); return 2; }
	if ((ret = io_uring_queue_init(4, &ring, 0)) < 0) {
		fprintf(stderr, "io_uring_queue_init: %s\n", strerror(-ret));
		return 2;
	}
	printf("io_uring write of 1 MiB at 0, O_DIRECT\n");
	fflush(stdout);
	sqe = io_uring_get_sqe(&ring);
	io_uring_prep_write(sqe, fd, buf, MIB, 0);
	io_uring_submit(&ring);
	if ((ret = io_uring_wait_cqe(&ring, &cqe)) < 0) {
		fprintf(stderr, "io_uring_wait_cqe: %s\n", strerror(-ret));
		return 2;
	}
	printf("write returned %d (%s); st_size %ld\n", cqe->res,
	       cqe->res < 0 ? strerror(-cqe->res) : "bytes", (long)lseek(fd, 0, SEEK_END));
	return 0;
}
