"""``zoo site``: the package as a static site a learner reads in a browser.

Every page is plain HTML with one stylesheet: no server, no JavaScript, no network at view time, relative links
only (the papers' links aside), readable at a phone's width. The same inputs give the same bytes.

    index.html                 every registered variant (plugins included) and every lesson and comparison
    variants/NAME/index.html   each declared change: classic vs variant choice, the flaw, the variant's code
                               for that part beside the classic code it replaces; the measured delta tables and
                               plot; the conformance suite's result
    lessons/NAME/index.html    the question, the verdict, the numbers and plots of ``zoo lab NAME``
    comparisons/NAME/index.html  a finished ``zoo compare`` (given with ``--runs``): its table and plot
    lab/NAME/                  only with ``--run-lessons``: the runs of the lessons that had none (``--quick``)
    zh/...                     only with ``--lang both``: the same pages in Chinese, each linking to its English one

``--lang zh`` writes the Chinese pages at the root instead. A Chinese page has the same code, numbers and plots as its
English one; only the words differ: the fixed words from :mod:`tasks.i18n.ui_zh`, the variants' summaries and changes
from :mod:`tasks.i18n.variants_zh`, the reports through :func:`tasks.i18n.reports_zh.translate_report`, a lesson's
``lesson.zh.md``. Every variant and lesson page names the article's sections it measures
(:mod:`tasks.i18n.article`), and the index lists the article's outline with each section's lessons and pages.

A build writes nothing outside its folder and trains nothing unless asked (``--run-lessons``): a lesson without a
result is listed on the index with the command that runs it.
"""
