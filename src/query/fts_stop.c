/*
 * fts_stop.c: the stop words of the text search languages, as data.
 *
 * Short lists written for Sable (the most frequent function words of each
 * language, diacritics already folded as text index version 3 folds them);
 * they are not MongoDB's lists.  Each list is sorted (strcmp order) so
 * sbl_fts_stop_word can binary-search it; tests/unit/test_fts.c checks that.
 */
#include "query/fts_int.h"

static const char *const en[] = {
    "a", "about", "above", "after", "again", "against", "all", "am", "an", "and", "any", "are",
    "as", "at", "be", "because", "been", "before", "being", "below", "between", "both", "but",
    "by", "can", "could", "did", "do", "does", "doing", "down", "during", "each", "few", "for",
    "from", "further", "had", "has", "have", "having", "he", "her", "here", "hers", "herself",
    "him", "himself", "his", "how", "i", "if", "in", "into", "is", "it", "its", "itself", "me",
    "more", "most", "my", "myself", "no", "nor", "not", "of", "off", "on", "once", "only", "or",
    "other", "ought", "our", "ours", "ourselves", "out", "over", "own", "same", "she", "should",
    "so", "some", "such", "than", "that", "the", "their", "theirs", "them", "themselves", "then",
    "there", "these", "they", "this", "those", "through", "to", "too", "under", "until", "up",
    "very", "was", "we", "were", "what", "when", "where", "which", "while", "who", "whom", "why",
    "with", "would", "you", "your", "yours", "yourself", "yourselves"};
static const char *const da[] = {"af", "at", "de", "den", "der", "det", "du", "en", "er", "et",
                                 "for", "han", "hun", "i", "ikke", "jeg", "med", "og", "paa",
                                 "som", "til", "var", "vi"};
static const char *const nl[] = {"aan", "dat", "de", "die", "een", "en", "het", "hij", "ik",
                                 "in", "is", "met", "niet", "of", "op", "te", "van", "voor",
                                 "was", "zijn"};
static const char *const fi[] = {"ei", "en", "han", "ja", "joka", "jos", "kun", "mutta", "ne",
                                 "niin", "oli", "on", "ovat", "se", "sen", "tai", "tama"};
static const char *const fr[] = {"au", "aux", "avec", "ce", "ces", "dans", "de", "des", "du",
                                 "elle", "en", "est", "et", "il", "je", "la", "le", "les",
                                 "leur", "lui", "mais", "ne", "nous", "on", "ou", "par", "pas",
                                 "pour", "qui", "sa", "se", "son", "sur", "un", "une", "vous"};
static const char *const de[] = {"auf", "aus", "bei", "das", "dem", "den", "der", "des", "die",
                                 "ein", "eine", "einen", "er", "es", "fur", "ich", "ist",
                                 "mit", "nicht", "sich", "sie", "und", "von", "wir", "zu"};
static const char *const hu[] = {"a", "az", "de", "egy", "es", "hogy", "is", "meg", "nem",
                                 "van"};
static const char *const it[] = {"che", "con", "da", "del", "della", "di", "e", "il", "in", "la",
                                 "le", "non", "per", "un", "una"};
static const char *const nb[] = {"av", "de", "den", "det", "en", "er", "et", "for", "han", "i",
                                 "ikke", "jeg", "med", "og", "pa", "som", "til"};
static const char *const pt[] = {"a", "ao", "com", "da", "de", "do", "e", "em", "na", "nao",
                                 "no", "o", "os", "para", "por", "que", "se", "um", "uma"};
static const char *const ro[] = {"cu", "de", "din", "in", "la", "nu", "pe", "si", "un", "una"};
static const char *const ru[] = {"\xd0\xb2", "\xd0\xb8", "\xd0\xbd\xd0\xb0",
                                 "\xd0\xbd\xd0\xb5", "\xd1\x87\xd1\x82\xd0\xbe"};
static const char *const es[] = {"a", "al", "con", "de", "del", "el", "en", "es", "la", "las",
                                 "lo", "los", "no", "para", "por", "que", "se", "su", "un",
                                 "una", "y"};
static const char *const sv[] = {"av", "de", "det", "en", "ett", "for", "har", "i", "jag",
                                 "med", "och", "om", "pa", "som", "till", "var"};
static const char *const tr[] = {"bir", "bu", "da", "de", "icin", "ile", "ne", "ve"};

#define L(x) x, sizeof(x) / sizeof(x[0])
const sbl_fts_lang_t sbl_fts_langs[] = {
    {"none", "none", NULL, NULL, 0},
    {"danish", "da", "danish", L(da)},
    {"dutch", "nl", "dutch", L(nl)},
    {"english", "en", "english", L(en)},
    {"finnish", "fi", "finnish", L(fi)},
    {"french", "fr", "french", L(fr)},
    {"german", "de", "german", L(de)},
    {"hungarian", "hu", "hungarian", L(hu)},
    {"italian", "it", "italian", L(it)},
    {"norwegian", "nb", "norwegian", L(nb)},
    {"portuguese", "pt", "portuguese", L(pt)},
    {"romanian", "ro", "romanian", L(ro)},
    {"russian", "ru", "russian", L(ru)},
    {"spanish", "es", "spanish", L(es)},
    {"swedish", "sv", "swedish", L(sv)},
    {"turkish", "tr", "turkish", L(tr)},
};
const size_t sbl_fts_nlangs = sizeof(sbl_fts_langs) / sizeof(sbl_fts_langs[0]);
