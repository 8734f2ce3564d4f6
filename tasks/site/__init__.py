"""``zoo site``: the package as a static site a learner reads in a browser.

Every page is plain HTML with one stylesheet: no server, no JavaScript, no network at view time, relative links
only (the papers' links aside), readable at a phone's width. The same inputs give the same bytes.

    index.html                 every registered variant (plugins included) and every lesson and comparison
    variants/NAME.html         each declared change: classic vs variant choice, the flaw, the variant's code
                               for that part beside the classic code it replaces; the measured delta tables and
                               plot; the conformance suite's result
    lessons/NAME.html          the question, the verdict, the numbers and plots of ``zoo lab NAME``
    comparisons/NAME.html      a finished ``zoo compare`` (given with ``--runs``): its table and plot
"""
