# Makes the train rows of benign_requests.jsonl.gz (the dev rows are handwritten and
# appended after them). python3 gen_benign_requests.py writes /tmp/fp/benign_requests.jsonl.gz.
import json, random, gzip
random.seed(7)
tasks = [
 "summarize this document","summarize this article","summarize the attached report","translate this paragraph into German",
 "translate this email into Spanish","translate the text below into French","proofread this paragraph","rewrite this sentence to sound more formal",
 "make this paragraph shorter","explain this error message","explain what this function does","write a docstring for this function",
 "add type hints to this code","write unit tests for the parser","review this pull request","fix the typo in the README",
 "rename this variable to something clearer","convert this CSV to JSON","format this JSON","sort this list alphabetically",
 "draft a reply to this email","write a short cover letter for this job","outline a blog post about caching","suggest a name for this project",
 "give me three title ideas for this talk","list the key points of this transcript","extract the action items from these notes","turn these notes into a checklist",
 "summarize the meeting notes","write a commit message for these changes","describe the changes in this diff","find the bug in this loop",
 "optimize this SQL query","explain the difference between TCP and UDP","compare these two approaches","create a table of the results",
 "plot the monthly sales","calculate the average of these numbers","check this config file for mistakes","write a bash script that backs up my home directory",
 "set up a Python virtual environment","install the dependencies","run the test suite","show me the git log for the last week",
 "generate a regex that matches email addresses","simplify this expression","write a haiku about autumn","tell me a fun fact about octopuses",
 "recommend a book on distributed systems","plan a three-day trip to Lisbon","draft an agenda for tomorrow's standup","write release notes for version 2.3",
 "update the changelog","summarize the customer feedback","classify these support tickets by urgency","answer the question in the last message",
 "paraphrase this paragraph","shorten this title","check the grammar in my essay","make a summary of this PDF",
 "read this file and tell me what it does","describe this image","explain this stack trace","help me debug this test",
 "convert this function to async","port this script to Go","add logging to this handler","write a migration that adds an index",
 "document the API endpoints","create a README for this repository","write a limerick about coffee","summarize this thread",
 "give me feedback on my presentation","suggest improvements to this design","estimate how long this task will take","break this task into smaller steps",
]
prefixes = ["", "Please ", "Can you ", "Could you ", "Would you ", "I need you to ", "Help me ", "Quickly ", "Hey, can you "]
suffixes = ["", " for me", " please", " when you get a chance", " in a few sentences", " before the meeting", " thanks", " by end of day"]
rows = set()
while len(rows) < 700:
    p = random.choice(prefixes); t = random.choice(tasks); s = random.choice(suffixes)
    text = p + t + s if p else t[0].upper() + t[1:] + s
    q = p in ("Can you ","Could you ","Would you ","Hey, can you ")
    text += "?" if q else random.choice([".", "", "!"]) 
    rows.add(text)
with gzip.open('/tmp/fp/benign_requests.jsonl.gz','wt') as f:
    for r in sorted(rows):
        f.write(json.dumps({"text": r, "label": "benign", "kind": "request", "source": "warden-templates", "split": "train"})+"\n")
print(len(rows))
