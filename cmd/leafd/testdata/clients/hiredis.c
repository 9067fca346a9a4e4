/* hiredis (Debian's libhiredis-dev) with its default settings, in the compatibility suite
 * (cmd/leafd/compat_test.go), which compiles it with gcc. Report lines: see compat_test.go. */
#include <hiredis/hiredis.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void fail(const char *what, const redisReply *r, const redisContext *c) {
	fprintf(stderr, "%s failed: %s\n", what,
	        r && r->type == REDIS_REPLY_ERROR ? r->str : (c && c->err ? c->errstr : "unexpected reply"));
	exit(1);
}

static void pass(const char *name) { printf("PASS %s\n", name); }

static redisContext *connect_auth(const char *host, int port, const char *password) {
	redisContext *c = redisConnect(host, port);
	if (c == NULL || c->err) fail("connect", NULL, c);
	redisReply *r = redisCommand(c, "AUTH %s", password);
	if (r == NULL || r->type != REDIS_REPLY_STATUS) fail("AUTH", r, c);
	freeReplyObject(r);
	return c;
}

/* integer checks an integer reply; hiredis keeps all 64 bits in a long long. */
static long long integer(redisReply *r, redisContext *c, const char *what) {
	if (r == NULL || r->type != REDIS_REPLY_INTEGER) fail(what, r, c);
	long long v = r->integer;
	freeReplyObject(r);
	return v;
}

static void ids(const char *kind, redisReply *r, redisContext *c, const char *what, size_t want) {
	if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements != want) fail(what, r, c);
	for (size_t i = 0; i < r->elements; i++) {
		if (r->element[i]->type != REDIS_REPLY_INTEGER) fail(what, r, c);
		printf("ID %s %lld\n", kind, r->element[i]->integer);
	}
}

int main(void) {
	setvbuf(stdout, NULL, _IOLBF, 0);
	const char *host = getenv("LEAFD_HOST"), *password = getenv("LEAFD_PASSWORD");
	int port = atoi(getenv("LEAFD_PORT"));
	redisContext *c = connect_auth(host, port, password);
	pass("connect");

	printf("ID order %lld\n", integer(redisCommand(c, "INCR order"), c, "INCR"));
	pass("incr");

	for (int i = 0; i < 1000; i++) redisAppendCommand(c, "INCR order");
	for (int i = 0; i < 1000; i++) {
		redisReply *r;
		if (redisGetReply(c, (void **)&r) != REDIS_OK) fail("pipeline", NULL, c);
		printf("ID order %lld\n", integer(r, c, "pipeline"));
	}
	pass("pipeline");

	redisReply *r = redisCommand(c, "IDS.SEGMENT order 10");
	ids("order", r, c, "IDS.SEGMENT", 10);
	freeReplyObject(r);
	pass("segment");

	long long id = integer(redisCommand(c, "IDS.SNOWFLAKE"), c, "IDS.SNOWFLAKE");
	printf("ID snowflake %lld\n", id);
	r = redisCommand(c, "IDS.SNOWFLAKE 1000");
	ids("snowflake", r, c, "IDS.SNOWFLAKE 1000", 1000);
	freeReplyObject(r);
	pass("snowflake");

	/* hiredis 0.14 parses RESP2 only: IDS.DECODE is a flat array. */
	r = redisCommand(c, "IDS.DECODE %lld", id);
	if (r == NULL || r->type != REDIS_REPLY_ARRAY) fail("IDS.DECODE", r, c);
	long long ts = -1, worker = -1, seq = -1;
	for (size_t i = 0; i + 1 < r->elements; i += 2) {
		const char *k = r->element[i]->str;
		long long v = r->element[i + 1]->integer;
		if (strcmp(k, "timestamp_ms") == 0) ts = v;
		if (strcmp(k, "worker_id") == 0) worker = v;
		if (strcmp(k, "sequence") == 0) seq = v;
	}
	freeReplyObject(r);
	printf("DECODE 2 %lld %lld %lld %lld\n", id, ts, worker, seq);

	/* An error reply is a reply of type REDIS_REPLY_ERROR, not a failed call. */
	r = redisCommand(c, "IDS.SEGMENT order 0");
	if (r == NULL || r->type != REDIS_REPLY_ERROR || strncmp(r->str, "LIMIT ", 6) != 0) fail("error", r, c);
	freeReplyObject(r);
	pass("error");

	r = redisCommand(c, "AUTH %s", password);
	if (r == NULL || r->type != REDIS_REPLY_STATUS || strcmp(r->str, "OK") != 0) fail("auth", r, c);
	freeReplyObject(r);
	pass("auth");

	redisAppendCommand(c, "MULTI");
	redisAppendCommand(c, "INCR order");
	redisAppendCommand(c, "IDS.SEGMENT order 3");
	redisAppendCommand(c, "EXEC");
	for (int i = 0; i < 4; i++) {
		if (redisGetReply(c, (void **)&r) != REDIS_OK) fail("transaction", NULL, c);
		if (i == 3) {
			if (r->type != REDIS_REPLY_ARRAY || r->elements != 2) fail("transaction", r, c);
			printf("ID order %lld\n", r->element[0]->integer);
			for (size_t j = 0; j < r->element[1]->elements; j++)
				printf("ID order %lld\n", r->element[1]->element[j]->integer);
		}
		freeReplyObject(r);
	}
	pass("transaction");

	printf("RESTART\n");
	char line[16];
	if (fgets(line, sizeof line, stdin) == NULL) return 1;
	/* hiredis does not reconnect by itself: the failed call leaves c->err set. */
	r = redisCommand(c, "INCR order");
	if (r == NULL) {
		redisFree(c);
		c = connect_auth(host, port, password);
		r = redisCommand(c, "INCR order");
	}
	printf("ID order %lld\n", integer(r, c, "INCR after restart"));
	pass("reconnect");
	redisFree(c);
	return 0;
}
