/* Passing over the lines outside an ARPA file's n-gram sections (_arpa.skip_lines). */
#ifndef NPLM_ARPA_LINES_H
#define NPLM_ARPA_LINES_H
#include <stdint.h>
#include <string.h>

/* data[pos:end] holds complete lines.  Returns where the first line that is not
 * blank (ASCII white space only) -- nor, with `comments`, a line starting with '#'
 * -- starts (end if there is none); *lines gets the number of lines before it. */
static Py_ssize_t nplm_skip_lines(const unsigned char *data, Py_ssize_t pos, Py_ssize_t end,
                                  int comments, int64_t *lines) {
    Py_ssize_t i = pos, start = pos;
    int64_t n = 0;
    while (i < end) {
        unsigned char ch = data[i];
        if (ch == '\n') {
            start = ++i;
            n++;
        } else if (ch == ' ' || ch == '\t' || ch == '\r' || ch == '\v' || ch == '\f') {
            i++;
        } else if (comments && ch == '#' && i == start) {
            const unsigned char *nl = memchr(data + i, '\n', (size_t)(end - i));
            if (nl == NULL)
                break;
            start = i = nl - data + 1;
            n++;
        } else {
            break;
        }
    }
    *lines = n;
    return start;
}
#endif
