#include "core/common.h"
#include "core/state.h"
#include "core/strbuf.h"
#include "core/util.h"

#include <math.h>

/*
 * The statement helpers of core/state.h that every *_db.c shares: one
 * message format for a failed step, binding by a letter per parameter,
 * and the prepare-bind-step-finalize of a one-statement write or count.
 * Built only on the public calls of state.h: the raw handle stays in
 * state.c.
 */

int kb_state_error(struct kb_state *st, const char *what)
{
	return error("%s in '%s': %s", what, kb_state_path(st), kb_state_errmsg(st));
}

int kb_state_prepare_logged(struct kb_state *st, sqlite3_stmt **stmt, const char *sql,
			    const char *what)
{
	if (kb_state_prepare(st, stmt, sql))
		return kb_state_error(st, what);
	return 0;
}

char *kb_state_column_strdup(sqlite3_stmt *stmt, int col)
{
	const char *s = (const char *)sqlite3_column_text(stmt, col);

	return s ? xstrdup(s) : NULL;
}

void kb_state_bind_real(sqlite3_stmt *stmt, int i, double v)
{
	if (isfinite(v))
		sqlite3_bind_double(stmt, i, v);
	else
		sqlite3_bind_null(stmt, i);
}

int kb_state_vbind(struct kb_state *st, sqlite3_stmt *stmt, const char *types, va_list ap)
{
	if (strlen(types) != (size_t)sqlite3_bind_parameter_count(stmt))
		return error("internal error: %zu bind types for %d parameters in '%s'", strlen(types),
			     sqlite3_bind_parameter_count(stmt), sqlite3_sql(stmt));
	for (int i = 0; types[i]; i++) {
		int rc = SQLITE_OK;

		switch (types[i]) {
		case 'i':
			rc = sqlite3_bind_int64(stmt, i + 1, va_arg(ap, int64_t));
			break;
		case 'I':
			kb_state_bind_id(stmt, i + 1, va_arg(ap, int64_t));
			break;
		case 'd':
			rc = sqlite3_bind_double(stmt, i + 1, va_arg(ap, double));
			break;
		case 'r':
			kb_state_bind_real(stmt, i + 1, va_arg(ap, double));
			break;
		case 't': {
			const char *s = va_arg(ap, const char *);

			rc = s ? sqlite3_bind_text(stmt, i + 1, s, -1, SQLITE_TRANSIENT)
			       : sqlite3_bind_null(stmt, i + 1);
			break;
		}
		default:
			return error("internal error: bad bind type '%c'", types[i]);
		}
		if (rc != SQLITE_OK)
			return kb_state_error(st, "could not bind a value");
	}
	return 0;
}

/*
 * Prepare sql, bind the arguments and step once: 1 on a row, KB_ENOTFOUND
 * at the end, -1 (logged). *stmt is for the caller to finalize (NULL is
 * fine).
 */
static int query_row_va(struct kb_state *st, sqlite3_stmt **stmt, const char *what,
			const char *sql, const char *types, va_list ap)
{
	struct strbuf msg = STRBUF_INIT;
	int rc;

	if (kb_state_prepare(st, stmt, sql)) {
		strbuf_addf(&msg, "could not prepare to %s", what);
		rc = kb_state_error(st, msg.buf);
		strbuf_release(&msg);
		return rc;
	}
	if (kb_state_vbind(st, *stmt, types, ap))
		return -1;
	return kb_state_step_one(st, *stmt, what);
}

/*
 * query_row_va, then: with out, the first column into *out (0); without,
 * the statement must end without a row (0, *changes set when not NULL).
 * KB_ENOTFOUND (with out) or -1 (logged) otherwise.
 */
static int run_va(struct kb_state *st, int *changes, int64_t *out, const char *what,
		  const char *sql, const char *types, va_list ap)
{
	sqlite3_stmt *stmt = NULL;
	int rc = query_row_va(st, &stmt, what, sql, types, ap);

	if (out && rc == 1) {
		*out = sqlite3_column_int64(stmt, 0);
		rc = 0;
	} else if (!out && rc == KB_ENOTFOUND) {
		if (changes)
			*changes = kb_state_changes(st);
		rc = 0;
	} else if (!out && rc == 1) {
		rc = error("internal error: a row from '%s'", sql);
	}
	sqlite3_finalize(stmt);
	return rc;
}

int kb_state_query_row(struct kb_state *st, sqlite3_stmt **stmt, const char *what,
		       const char *sql, const char *types, ...)
{
	va_list ap;
	int rc;

	va_start(ap, types);
	rc = query_row_va(st, stmt, what, sql, types, ap);
	va_end(ap);
	return rc;
}

int kb_state_run(struct kb_state *st, int *changes, const char *what, const char *sql,
		 const char *types, ...)
{
	va_list ap;
	int rc;

	va_start(ap, types);
	rc = run_va(st, changes, NULL, what, sql, types, ap);
	va_end(ap);
	return rc;
}

int kb_state_query_int(struct kb_state *st, int64_t *out, const char *what, const char *sql,
		       const char *types, ...)
{
	va_list ap;
	int rc;

	va_start(ap, types);
	rc = run_va(st, NULL, out, what, sql, types, ap);
	va_end(ap);
	return rc;
}

int kb_state_read_rows(struct kb_state *st, sqlite3_stmt *stmt, const char *what,
		       size_t elem_size, void **out, size_t *n,
		       int (*read_row)(sqlite3_stmt *stmt, void *elem, void *payload),
		       void (*release)(void *elem), void *payload)
{
	char *v = NULL;
	size_t nr = 0, alloc = 0;
	int step, rc = 0;

	*out = NULL;
	*n = 0;
	while (!rc && (step = sqlite3_step(stmt)) == SQLITE_ROW) {
		if (nr == alloc) {
			alloc = alloc ? 2 * alloc : 16;
			v = xrealloc(v, alloc * elem_size);
		}
		rc = read_row(stmt, v + nr++ * elem_size, payload);
	}
	if (!rc && step != SQLITE_DONE)
		rc = error("could not %s in '%s': %s", what, kb_state_path(st), kb_state_errmsg(st));
	if (rc) {
		for (size_t i = 0; i < nr; i++)
			release(v + i * elem_size);
		free(v);
		return -1;
	}
	*out = v;
	*n = nr;
	return 0;
}
