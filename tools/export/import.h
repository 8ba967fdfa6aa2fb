/*
 * import.h: sable-import's CSV and TSV reader (import_csv.c), which turns
 * rows into documents with the --fields / --headerline names, dotted names
 * as sub-documents, and --columnsHaveTypes types (name.int32(), ...).
 */
#ifndef SABLE_TOOLS_IMPORT_H
#define SABLE_TOOLS_IMPORT_H

#include "tool.h"

typedef enum grace { GRACE_AUTOCAST, GRACE_SKIPFIELD, GRACE_SKIPROW, GRACE_STOP } grace_t;

typedef struct csv_col {
    char *name;
    char type[16]; /* "" (auto when untyped), string, int32, int64, double, decimal,
                      boolean, date, date_go, date_ms, date_oracle, binary, auto */
    char *arg;     /* the type's argument: a date layout, a binary encoding */
} csv_col_t;

typedef struct csv_reader {
    tool_stream_t *in;
    bool tsv, typed, ignore_blanks;
    grace_t grace;
    csv_col_t *cols;
    int ncols;
    tool_window_t win;
    int64_t line;
    char *cell; /* the cell being read */
    size_t cell_cap;
} csv_reader_t;

/* Set the columns from a list of names ("a", "b.c", or typed "a.int32()"). */
int csv_set_columns(csv_reader_t *r, char **names, int n);
/* Read the header line and take it as the columns. */
int csv_read_header(csv_reader_t *r);
/* The next row as a document: 1 (doc initialized; caller destroys), 0 at the end,
   2 a row skipped (--parseGrace skipRow), -1 on an error (message printed). */
int csv_next(csv_reader_t *r, bson_t *doc);
void csv_reader_free(csv_reader_t *r);

#endif
